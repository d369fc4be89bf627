// expect: error: main actor-isolated property 'text' can not be mutated from a Sendable closure
// A completion runs on whatever thread the run ends on, so it cannot touch main-actor state.
import Future

@MainActor final class ViewModel {
    var text = ""

    func load(_ name: Guarantee<String>) {
        name.run(some: { self.text = $0 })
    }
}
