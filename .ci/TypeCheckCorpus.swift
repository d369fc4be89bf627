// Chains as users write them, compiled by .ci/run against the Future module with
// `-warn-long-expression-type-checking=300` and warnings as errors: a chain that Swift takes more
// than 300 ms to type-check fails CI. Each function holds one chain, so that a slow one is named.
// What makes a chain slow is a closure whose return type Swift must guess among overloads, meeting
// operators and literals; see README.md, "Chains that compile at once".

import Future

// The seed's iTunes lookup, in its style: small functions, each a step of one of the three shapes.
enum LookupError: Error {
    case requestFailed, invalidJson, noResultFound, tooShort, unpublished
}

struct Response: Sendable { var fields: [String: String] }
struct Artist: Sendable { var id: Int, name: String, genre: String }

func iTunesLookUp(id: String) -> Promise<[UInt8], LookupError> { Promise(value: Array(id.utf8)) }
func toText(from bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }
func toDictionary(from text: String) -> Result<[String: String], LookupError> {
    text.isEmpty ? .failure(.invalidJson) : .success(["name": text, "genre": "Rock"])
}
func toResponse(from dict: [String: String]) -> Response { Response(fields: dict) }
func toArtist(from response: Response) -> Result<Artist, LookupError> {
    guard let name = response.fields["name"] else { return .failure(.invalidJson) }
    return .success(Artist(id: 1, name: name, genre: response.fields["genre"] ?? ""))
}
func filterRock(_ artist: Artist) -> Result<Artist, LookupError> {
    artist.genre == "Rock" ? .success(artist) : .failure(.noResultFound)
}
func fetchAlbums(of artist: Artist) -> Promise<[String], LookupError> { Promise(value: []) }
func firstAlbum(_ albums: [String]) -> String { albums.first ?? "" }
func checkTitle(_ title: String) -> Result<String, LookupError> {
    title.count > 1 ? .success(title) : .failure(.tooShort)
}
func publish(_ title: String) -> Promise<String, LookupError> { Promise(value: title) }
func cover(for title: String) -> Guarantee<String> { Guarantee(value: "\(title).jpg") }
func printLine(_ line: String) { print(line) }
func report(_ error: LookupError) { print(error) }

func seedPipelineOfTenFunctionSteps() {
    iTunesLookUp(id: "909253")
        .then(toText)
        .then(toDictionary)
        .then(toResponse)
        .then(toArtist)
        .then(filterRock)
        .then(fetchAlbums)
        .then(firstAlbum)
        .then(checkTitle)
        .then(publish)
        .then(cover)
        .run(some: printLine, none: report)
}

func sixThenClosuresOfEachShape() {
    iTunesLookUp(id: "909253")
        .then { bytes in toText(from: bytes) }
        .then { text in toDictionary(from: text) }
        .then { dict in Response(fields: dict).fields["name"] ?? "" }
        .then { name in "\(name) (\(name.count) letters)" }
        .then { line in publish(line) }
        .then { line in line.uppercased() }
        .run(some: printLine, none: report)
}

func tenMapsWithOperatorsAndLiterals() {
    Promise<Int, LookupError>(value: 1)
        .map { $0 + 1 }
        .map { $0 * 2 }
        .map { $0 - 3 }
        .map { n in n * n + 1 }
        .map { $0 % 7 }
        .map { $0 / 2 }
        .map { $0 * 3 + 4 }
        .map { -$0 }
        .map { $0 > 10 ? $0 : 10 }
        .map { "\($0) items" }
        .run(some: printLine, none: report)
}

func aGuaranteeStepInAChainThatCanFail() {
    iTunesLookUp(id: "909253")
        .then(toText)
        .then { cover(for: $0) }
        .then { checkTitle($0) }
        .run(some: printLine, none: report)
}

func aChainThatCannotFailWithAStepThatCan() {
    after(.milliseconds(10))
        .flatMap { publish("status") }
        .map { $0.count }
        .run(some: { print($0) }, none: report)
}

func whenTimeoutAndRetryInOneChain() {
    when(fulfilled: iTunesLookUp(id: "1"), iTunesLookUp(id: "2"))
        .map { first, second in first.count + second.count }
        .timeout(.seconds(5), orFailWith: .requestFailed)
        .retry(3, delay: .milliseconds(100), while: { $0 == .requestFailed })
        .map { "\($0) bytes" }
        .run(some: printLine, none: report)
}

func errorsHandledAndMapped() {
    iTunesLookUp(id: "909253")
        .then(toText)
        .mapError { _ in LookupError.unpublished }
        .recover { _ in Guarantee(value: "offline") }
        .map { $0.count }
        .run(some: { print($0) })
}

func anErasedChainWithATimeoutAndAGuaranteeRun() {
    iTunesLookUp(id: "909253")
        .eraseToAnyError()
        .then { bytes in Promise<String, any Error>(value: toText(from: bytes)) }
        .timeout(.seconds(5))
        .map { $0.count }
        .recover { _ in 0 }
        .run(some: { print($0) })
}

// Steps on the main actor, tied to a token, after value closures with operators and literals.
@MainActor final class ArtistScreen {
    var title = ""
    var albums: [String] = []
    let token = InvalidationToken()

    func show(id: String) {
        iTunesLookUp(id: id)
            .map { $0.count * 2 + 1 }
            .map { "\($0) bytes" }
            .map(on: .main) { self.title + $0 }
            .done(on: .main, tiedTo: token) { self.title = $0 }
            .catch(on: .main, tiedTo: token) { self.title = "failed: \($0)" }
            .run()
            .store(in: token)
    }
}

func sequenceHelpersInAPipeline() {
    iTunesLookUp(id: "909253")
        .map { bytes in bytes.map { Int($0) } }
        .filterValues { $0 > 32 && $0 % 2 == 0 }
        .mapValues { $0 * 3 + 1 }
        .compactMapValues { $0 > 100 ? "\($0)" : nil }
        .thenMap(concurrently: 2) { text in publish(text) }
        .sortedValues()
        .map { $0.joined(separator: ", ") }
        .run(some: printLine, none: report)
}

// A chain that cannot fail, followed by steps that can: the chain takes the step's error type.
func cachedCount() -> Guarantee<Int> { Guarantee(value: 3) }
func fetchAlbumCount(_ n: Int) -> Promise<Int, LookupError> { Promise(value: n) }

func aRecoverThenAStepThatCanFail() {
    iTunesLookUp(id: "909253")
        .recover { _ in [] }
        .then { bytes in fetchAlbumCount(bytes.count) }
        .then { count in checkTitle("\(count) albums") }
        .map { $0.count }
        .run(some: { print($0) }, none: report)
}

func afterThenAStepThatCanFail() {
    after(.milliseconds(10))
        .then { iTunesLookUp(id: "909253") }
        .then(toText)
        .run(some: printLine, none: report)
}

func sixMapsAndTwoPromiseStepsOnAGuarantee() {
    cachedCount()
        .map { count in count.description }
        .map { text in text.count }
        .then { n in fetchAlbumCount(n) }
        .map { count in "\(count) albums".uppercased() }
        .map { line in "\(line) <\(line.lowercased())>" }
        .map { line in line.count * 2 + 1 }
        .then { n in iTunesLookUp(id: "\(n)") }
        .map { bytes in bytes.isEmpty }
        .run(some: { print($0) }, none: report)
}

func aGuaranteeThenAResultThenAPromise() {
    Guarantee<String> { $0.fulfill("Rock") }
        .then { checkTitle($0) }
        .then { title in publish(title) }
        .then { cover(for: $0) }
        .run(some: printLine, none: report)
}

func whenResolvedThenAStepThatCanFail() {
    when(resolved: [iTunesLookUp(id: "1"), iTunesLookUp(id: "2")])
        .then { results in fetchAlbumCount(results.count) }
        .map { "\($0) lookups" }
        .run(some: printLine, none: report)
}

// PromiseKit's closures that throw, on a chain that fails with `any Error`, as a port writes them
// (a `then` closure returns `Promise(error:)`: see `map` on `any Error` chains).
struct Invalid: Error {}
func fetchAny(_ id: String) -> Promise<[UInt8], any Error> { Promise(value: Array(id.utf8)) }
func decodeArtist(_ bytes: [UInt8]) throws -> Artist {
    guard !bytes.isEmpty else { throw Invalid() }
    return Artist(id: bytes.count, name: toText(from: bytes), genre: "Rock")
}

func closuresThatThrowOnAnErasedChain() {
    firstly { fetchAny("909253") }
        .map { try decodeArtist($0) }
        .then { artist -> Promise<[String], any Error> in
            guard artist.genre == "Rock" else { return Promise(error: Invalid()) }
            return fetchAlbums(of: artist).eraseToAnyError()
        }
        .recover { error -> Promise<[String], any Error> in
            guard error is Invalid else { throw error }
            return Promise(value: [])
        }
        .map { albums -> String in
            guard let first = albums.first else { throw Invalid() }
            return first.uppercased()
        }
        .done { title in
            guard title.count > 1 else { throw Invalid() }
            printLine(title)
        }
        .run(some: {}, none: { print($0) })
}
