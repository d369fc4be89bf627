// expect: error: 'run(some:)' is unavailable: this promise can fail: handle its error first with catch(_:) or recover(_:), or run it with run(some:none:)
// As RunningAPromiseThatCanFail.swift, for the run that takes only the value.
import Future

enum FetchError: Error { case offline }

func fetchCount() -> Promise<Int, FetchError> { Promise(value: 1) }

func refresh() {
    fetchCount().run(some: { print($0) })
}
