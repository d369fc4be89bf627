// expect: error: 'finally' has been renamed to 'ensure': Future's finally is ensure(_:): .catch { … }.ensure { … }.run()
// PromiseKit ends a chain with finally; Future's word is ensure.
import Future

enum FetchError: Error { case offline }

func fetchCount() -> Promise<Int, FetchError> { Promise(value: 1) }

func refresh() {
    fetchCount()
        .done { print($0) }
        .catch { print($0) }
        .finally { print("done") }
        .run()
}
