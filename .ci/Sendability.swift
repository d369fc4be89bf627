// Compiled by .ci/run in Swift 6 mode, with warnings as errors, against the Future module as a
// package user imports it. Promises cross isolation here with no `nonisolated(unsafe)`,
// `@preconcurrency` or `@unchecked` (.ci/run checks that this file has none).

import Dispatch
import Future

struct FetchError: Error {}

func fetchCount() -> Promise<Int, FetchError> { Promise { $0.fulfill(1) } }

/// A promise kept in a `Sendable` struct.
struct Screen: Sendable {
    let count: Promise<Int, FetchError>
}

enum Constants {
    /// A promise in a `static let`.
    static let greeting: Guarantee<String> = Guarantee(value: "hello")
}

func crossing() {
    let promise = fetchCount()
    Task.detached { _ = await promise.result }
    DispatchQueue.global().async { promise.run { _ in } }
    let screen = Screen(count: promise)
    Task { _ = try await screen.count.value }
}

/// A value that is not `Sendable` may still travel through a run, one step after another.
final class Document {
    var lines: [String] = []
}

@MainActor final class ViewModel {
    var text = ""
    var document = Document()

    func load() async {
        do {
            text = "\(try await fetchCount().value ?? 0)"
        } catch {
            text = "failed: \(error)"
        }
        text = await Constants.greeting.value ?? ""
        document = await Promise<Document, Never> { $0.fulfill(Document()) }.value ?? document
    }

    func start() {
        fetchCount().run(
            some: { count in Task { @MainActor in self.text = "\(count)" } },
            none: { _ in })
    }
}

actor Tally {
    var total = 0

    func add() async {
        total += (try? await fetchCount().value ?? 0) ?? 0
        fetchCount().run { _ in }.cancel()
    }
}
