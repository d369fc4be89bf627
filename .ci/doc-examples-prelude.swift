// The app that the documentation's examples live in: every name they use without declaring it.
// `.ci/doc-examples` typechecks each example against this file and the Future module; nothing here
// runs, so the bodies are `given()`. Keep the names consistent with README.md's (`lookUp(id:)`).

import Dispatch
import Foundation
import Future

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A value of any type, for declarations that are only typechecked.
func given<T>() -> T { fatalError("doc examples are typechecked, not run") }

// Models.
struct User: Sendable, Decodable { var id: Int, name: String }
struct Image: Sendable {}
struct Credentials: Sendable { var user: User }
struct Model: Sendable { static let unknown = Model() }
struct Feed: Sendable { static let empty = Feed() }
struct Place: Sendable {}
struct Config: Sendable {}
struct Status: Sendable {}

// Errors.
enum LookupError: Error { case notFound }
enum NetworkError: Error { case notFound, slow, offline }
enum FeedError: Error {
    case notFound, unavailable
    var isTransient: Bool { self == .unavailable }
}
enum SearchError: Error { case noResultFound }
enum GPSError: Error { case denied }

// Work that makes promises.
func lookUp(id: Int) -> Promise<String, LookupError> { given() }
func fetchUser(_ id: Int) -> Promise<User, NetworkError> { given() }
func fetchAvatar(_ id: Int) -> Promise<Image, NetworkError> { given() }
func fetchAvatar(for user: User) -> Promise<Image, NetworkError> { given() }
func avatar(of user: User) -> Promise<Image, NetworkError> { given() }
func cachedAvatar(for credentials: Credentials) -> Guarantee<Image> { given() }
func login() -> Promise<Credentials, NetworkError> { given() }
func download(_ url: URL) -> Promise<Data, NetworkError> { given() }
func fetch(_ url: URL) -> Promise<Data, any Error> { given() }
func fetchStatus() -> Promise<Status, NetworkError> { given() }
func poll() -> Promise<Status, NetworkError> { given() }
func fetchFeed() -> Promise<Feed, FeedError> { given() }
func cachedFeed() -> Guarantee<Feed> { given() }
func fetchProfile() -> Promise<User, NetworkError> { given() }
func fetchDetails(of model: Model) -> Promise<Model, LookupError> { given() }

// Steps.
func toModel(_ name: String) -> Result<Model, LookupError> { given() }
func toDictionary(_ data: Data) -> Result<[String: String], NetworkError> { given() }
func resize(_ image: Image) -> Image { given() }

// Callback APIs.
func fetch(completion: @escaping @Sendable (Data?, (any Error)?) -> Void) {}
func loadConfig() throws(DecodingError) -> Config { given() }

// What results go to.
func show<T>(_ value: T) {}
func show<A, B>(_ first: A, _ second: B) {}
func report<E: Error>(_ error: E) {}

final class Cache: Sendable { func store(_ user: User) {} }
final class Spinner: Sendable {
    func start() {}
    func stop() {}
}
final class Screen: Sendable { let runs = RunBag() }
/// The screen of TestingTime.md, which takes a clock.
@MainActor final class FeedScreen {
    var feed: Feed?
    init(clock: any Clock<Duration>) {}
    func load() {}
}

// Values at hand.
let clock = ManualClock()  // a module's own `clock` hides Glibc's clock() function
let id = 909253
let ids = [1, 2, 3]
let url = URL(string: "https://example.com/feed")!
let urls = [url]
let mirrors = [url]
let session = URLSession.shared
let decoder = JSONDecoder()
let queue = DispatchQueue(label: "doc examples")
let data = Data()
let error: (any Error)? = nil
let resolver: Resolver<Data, any Error> = given()
let name = lookUp(id: id)
let results: Promise<[User], SearchError> = given()
let followers: Promise<[User], NetworkError> = given()
let cache = Cache()
let spinner = Spinner()
let model = Screen()
let isFresh = false
let cached = Feed.empty
let photo = Image()
@MainActor var text = ""

// The iTunes lookup of the Getting started article.
enum ITunesError: Error { case requestFailed, malformedAnswer, noRockArtist }
struct Artist: Decodable, Sendable { var artistName: String, primaryGenreName: String }
struct Answer: Decodable, Sendable { var results: [Artist] }
func iTunesLookUp(id: String) -> Promise<Data, ITunesError> { given() }
func decodeAnswer(_ data: Data) -> Result<Answer, ITunesError> { given() }
func firstRockArtist(_ answer: Answer) -> Result<Artist, ITunesError> { given() }

// Promises of lists, for the sequence helpers.
struct Album: Sendable { var tracks: [String] }
extension User { var isActive: Bool { true } }
func fetchUsers() -> Promise<[User], NetworkError> { given() }
func fetchAlbums() -> Promise<[Album], NetworkError> { given() }
func fetchLines() -> Promise<[String], NetworkError> { given() }
func fetchScores() -> Promise<[Int], NetworkError> { given() }
func fetchResults() -> Promise<[User], any Error> { given() }
func fetchMessages() -> Promise<[String], any Error> { given() }
func search(_ query: String) -> Promise<[User], NetworkError> { given() }
let queries: Promise<[String], NetworkError> = given()
let files = [url]
func upload(_ file: URL) -> Promise<Void, NetworkError> { given() }

// The main actor's side: a screen's state, and the token that silences its callbacks.
struct Item: Sendable { var title: String }
func loadItem(_ id: Int) -> Promise<Item, NetworkError> { given() }
func find(_ text: String) -> Promise<[Item], NetworkError> { given() }
func image(_ url: URL) -> Promise<Image, NetworkError> { given() }
@MainActor final class Cell {}
@MainActor func cell(for item: Item) -> Cell { given() }
@MainActor var items: [Item] = []
let token = InvalidationToken()

// Callback APIs and a logger, for resolvers passed as handlers and debug reports.
func load(completion: @escaping @Sendable (Data) -> Void) {}
final class AppLogger: Sendable { func warning(_ message: String) {} }
let logger = AppLogger()

// Coming from PromiseKit: a token refresh and a sync.
struct Token: Sendable { var value: String }
func requestToken() -> Promise<Token, NetworkError> { given() }
func syncContacts() -> Promise<Void, NetworkError> { given() }
