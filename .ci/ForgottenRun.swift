// Compiled by .ci/run, which expects a warning here: a chain that is built and never run does
// nothing, so the compiler must say so (builders are not @discardableResult; terminals are).

func forgotten() {
    Promise<Int, Never>(value: 1).then { $0 + 1 }
}

func started() {
    Promise<Int, Never>(value: 1).then { $0 + 1 }.run()
}
