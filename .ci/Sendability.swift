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

// MARK: - From PromiseKit and Tomorrowland (issue 19)

struct Item: Sendable { let id: Int }

func loadItem(_ id: Int) -> Promise<Item, FetchError> { Promise { $0.fulfill(Item(id: id)) } }

/// PromiseKit runs `done` on main; here a step says so, and may then use main-actor state.
@MainActor final class ItemsScreen {
    var items: [Item] = []
    var message = ""
    let token = InvalidationToken()

    func show() {
        loadItem(1)
            .done(on: .main) { self.items = [$0] }
            .catch(on: .main) { self.message = "\($0)" }
            .run()
    }

    /// Tomorrowland's image view: a new load silences the last one's callbacks and cancels it.
    func reload(_ id: Int) {
        token.invalidate()
        loadItem(id)
            .map(on: .main, tiedTo: token) { "\($0.id) of \(self.items.count)" }
            .done(on: .main, tiedTo: token) { self.message = $0 }
            .catch(on: .main, tiedTo: token) { _ in self.message = "failed" }
            .run()
            .store(in: token)
    }

    /// A reload kept in a property: each run ties its steps to the token as it starts.
    lazy var refresh: Guarantee<Void> = loadItem(3)
        .done(on: .main, tiedTo: token) { self.items.append($0) }
        .catch(on: .main, tiedTo: token) { _ in self.message = "failed" }
}

/// PromiseKit's way of wrapping a completion handler (seed 000): the resolver passed point-free.
func fetch(completion: @escaping @Sendable (String?, (any Error)?) -> Void) { completion("", nil) }
func fetchGreeting() -> Promise<String, any Error> {
    return Promise { fetch(completion: $0.resolve) }
}

func sequences() {
    _ = Promise<[Int], any Error>(value: [3, 1]).filterValues { $0 > 1 }.sortedValues().firstValue
    _ = any(loadItem(1), fetchCount())
    _ = when(fulfilled: [loadItem(1).ignoringCancel(), loadItem(2).ignoringCancel()])
    PromiseDiagnostics.handler = { message in print("promise:", message) }
}
