// expect: error: type 'Draft' does not conform to the 'Sendable' protocol
// A main-actor step hands its value to the main actor: the value must be `Sendable`.
import Future

final class Draft {
    var text = ""
}

@MainActor final class Editor {
    var draft = Draft()

    func open(_ draft: Guarantee<Draft>) {
        draft.done(on: .main) { self.draft = $0 }.run()
    }
}
