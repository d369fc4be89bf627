// expect: error: 'run()' is unavailable: this promise can fail: handle its error first with catch(_:) or recover(_:), or run it with run(some:none:)
// run() and run(some:) are for a Guarantee: a promise that can fail must say where its error goes.
import Future

enum FetchError: Error { case offline }

func fetchCount() -> Promise<Int, FetchError> { Promise(value: 1) }

func refresh() {
    fetchCount().run()
}
