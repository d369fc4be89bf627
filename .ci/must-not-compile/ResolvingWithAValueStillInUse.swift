// expect: error: sending 'document' risks causing data races
// The value an operation resolves with goes on in the run: the operation must let go of it.
import Future

final class Document {
    var lines: [String] = []
}

func load() -> Guarantee<Document> {
    Guarantee { resolver in
        let document = Document()
        resolver.fulfill(document)
        document.lines.append("too late")
    }
}
