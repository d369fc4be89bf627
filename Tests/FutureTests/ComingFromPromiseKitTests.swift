import Dispatch
import Foundation
import Testing

@testable import Future

// The examples of the "Coming from PromiseKit" article whose output matters, run: the token
// cache (one request for five callers, and what a cancelled caller does to it) and ensure(on:)
// (the chain goes on, and a later `queue.sync` on the cleanup's queue does not deadlock). The code
// is the article's; only the request is a stub that counts.

/// A token, as the article's app has.
private struct Token: Sendable, Equatable { var value: String }

/// A refresh request that takes `delay` and counts how many were made.
private final class TokenServer: Sendable {
    let requests = Counter()
    let delay: DispatchTimeInterval
    init(delay: DispatchTimeInterval = .milliseconds(100)) { self.delay = delay }

    func requestToken() -> Promise<Token, TestError> {
        Promise { [requests, delay] resolver in
            let number = requests.increment()
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
                resolver.fulfill(Token(value: "token \(number)"))
            }
        }
    }
}

/// The article's token store, with its `requestToken()` from a server and the sharing as a
/// parameter, to show what plain `share()` does too.
private final class TokenStore: @unchecked Sendable {
    private let lock = NSLock()
    private var inFlight: Promise<Token, TestError>?  // guarded by lock
    private let server: TokenServer
    private let cancelsWhenAbandoned: Bool

    init(_ server: TokenServer, cancelsWhenAbandoned: Bool = false) {
        self.server = server
        self.cancelsWhenAbandoned = cancelsWhenAbandoned
    }

    func token() -> Promise<Token, TestError> {
        lock.withLock {
            if let inFlight { return inFlight }
            let refresh = server.requestToken()
                .ensure { self.lock.withLock { self.inFlight = nil } }
                .share(cancelsWhenAbandoned: cancelsWhenAbandoned)
            inFlight = refresh
            return refresh
        }
    }
}

@Suite("Coming from PromiseKit") struct ComingFromPromiseKit {
    @Test func fiveCallersOfTheTokenCacheMakeOneRequest() async throws {
        let server = TokenServer()
        let store = TokenStore(server)
        let tokens = try await awaited("five callers' tokens") {
            try await withThrowingTaskGroup(of: Token?.self) { group in
                for _ in 1...5 { group.addTask { try await store.token().value } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        #expect(tokens == Array(repeating: Token(value: "token 1"), count: 5))
        #expect(server.requests.value == 1)
        // Once it has ended, the cache is clear: the next caller refreshes again.
        let next = store.token()
        #expect(
            try await awaited("the next token") { try await next.value } == Token(value: "token 2"))
        #expect(server.requests.value == 2)
    }

    /// A caller that runs the token rather than awaiting it keeps nothing of the store's
    /// promise, which the `ensure` step lets go of as the request ends: its run gets the token.
    @Test(arguments: [false, true])
    func aCallerThatRunsTheTokenGetsIt(cancelsWhenAbandoned: Bool) {
        let store = TokenStore(TokenServer(), cancelsWhenAbandoned: cancelsWhenAbandoned)
        let tokens = Delivery<Token>()
        let handle = store.token().run(some: { tokens.send($0) }, none: { _ in })
        #expect(eventually { handle.isCancelled || !tokens.all.isEmpty })
        #expect(!handle.isCancelled)
        #expect(tokens.all == [Token(value: "token 1")])
    }

    @Test func withoutCancelsWhenAbandonedTheRefreshGoesOnForTheNextCaller() async throws {
        let server = TokenServer()
        let store = TokenStore(server, cancelsWhenAbandoned: false)
        let handle = store.token().run(some: { _ in }, none: { _ in })
        #expect(eventually { server.requests.value == 1 })
        handle.cancel()  // the only caller left its screen
        let next = store.token()  // at once, while the refresh goes on
        #expect(try await awaited("the token") { try await next.value } == Token(value: "token 1"))
        #expect(server.requests.value == 1)
    }

    @Test func withPlainShareTheNextCallerStartsANewRefresh() async throws {
        let server = TokenServer()
        let store = TokenStore(server, cancelsWhenAbandoned: true)
        let handle = store.token().run(some: { _ in }, none: { _ in })
        #expect(eventually { server.requests.value == 1 })
        handle.cancel()  // the refresh is cancelled with its only caller
        let next = store.token()
        #expect(try await awaited("the token") { try await next.value } == Token(value: "token 2"))
        #expect(server.requests.value == 2)
    }

    @Test func ensureOnAQueueCleansUpBeforeTheNextStepWhichMaySyncOnTheQueue() async throws {
        let store = DispatchQueue(label: "contacts")
        let syncing = Counter()
        syncing.increment()
        let synced = later(3)
            .ensure(on: store) { syncing.decrement() }
            .map { count in store.sync { (count, syncing.value) } }
        let (count, stillSyncing) = try #require(
            await awaited("the sync") { await synced.value } ?? nil)
        #expect(count == 3)
        #expect(stillSyncing == 0)  // the cleanup returned before the step started
    }

    @Test func aPendingPromiseWaitsForItsResolverMadeAtOnce() async {
        let (signal, fire) = Guarantee<Void>.pending()
        let synced = Delivery<Int>()
        signal.then { later(1) }.run(some: { synced.send($0) })
        #expect(synced.all.isEmpty)
        fire.fulfill()
        #expect(await synced.arrival() == 1)
    }
}
