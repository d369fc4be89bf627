// Compiled by .ci/run with CopyIn/Future.swift as one module built with
// `-default-isolation MainActor`, as Xcode 26 builds a new app target: every declaration that
// does not say otherwise is the main actor's, the copied-in library's too unless it says
// `nonisolated`. A view model, main-actor by default, keeps its state up to date through the
// main-actor steps, a token and `await promise.value`, in Swift 5 and Swift 6 modes, debug and
// release.

import Dispatch

// An app's model types and services say `nonisolated` to be used off the main actor, as here.
nonisolated struct Item: Equatable, Sendable {
    let id: Int
    let name: String
}

nonisolated enum LoadError: Swift.Error, Equatable {
    case notFound(Int)
}

/// Loads an item on a queue of its own, off the main actor, as a network call resolves.
nonisolated func loadItem(_ id: Int) -> Promise<Item, LoadError> {
    Promise { resolver in
        DispatchQueue.global().async {
            guard id > 0 else { return resolver.reject(.notFound(id)) }
            resolver.fulfill(Item(id: id, name: "item \(id)"))
        }
    }
}

/// A screen's state: main-actor isolated by default, with no annotation.
final class ItemsModel {
    let token = InvalidationToken()
    var titles: [String] = []
    var failures: [LoadError] = []

    /// Shows an item: the steps read and write the model's state on the main actor.
    func show(_ item: Promise<Item, LoadError>) -> Guarantee<Void> {
        item
            .map(on: .main) { "\(self.titles.count + 1). \($0.name)" }
            .done(on: .main, tiedTo: token) { self.titles.append($0) }
            .catch(on: .main) { self.failures.append($0) }
    }

    /// Loads an item from async code: the code after `await` goes on on the main actor.
    func refresh(_ id: Int) async throws(LoadError) -> Item? {
        let item = try await loadItem(id).value
        if let item { titles.append("refreshed \(item.name)") }
        return item
    }
}

@main enum App {
    static func main() async {
        let model = ItemsModel()
        await model.show(loadItem(1)).value
        await model.show(loadItem(-2)).value
        let refreshed = try? await model.refresh(3)

        // A callback tied to the token is silenced when the token is invalidated during the run.
        let (late, resolver) = Promise<Item, LoadError>.pending()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            model.show(late).run(some: { done.resume() })
            model.token.invalidate()
            resolver.fulfill(Item(id: 4, name: "item 4"))
        }

        precondition(model.titles == ["1. item 1", "refreshed item 3"], "\(model.titles)")
        precondition(model.failures == [.notFound(-2)], "\(model.failures)")
        precondition(refreshed == Item(id: 3, name: "item 3"))
        print("default main actor: \(model.titles), \(model.failures)")
    }
}
