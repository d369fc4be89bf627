// expect: error: main actor-isolated property 'items' can not be mutated from a Sendable closure
// `on(.main)` moves the run to the main queue, but a step's closure is still `@Sendable`, not
// isolated to the main actor: `done(on: .main)` is the step that may touch main-actor state.
import Future

@MainActor final class ItemsScreen {
    var items: [Int] = []

    func show(_ item: Guarantee<Int>) {
        item.on(.main).done { self.items = [$0] }.run()
    }
}
