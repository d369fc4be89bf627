// expect: error: type 'Document' does not conform to the 'Sendable' protocol
// Every run of a constant promise hands on the same value, from any thread.
import Future

final class Document {
    var lines: [String] = []
}

func cached(_ document: Document) -> Guarantee<Document> {
    Guarantee(value: document)
}
