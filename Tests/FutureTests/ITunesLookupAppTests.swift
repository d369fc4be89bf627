import Dispatch
import Foundation
import Testing

// These tests run processes, which macOS and Linux alone can.
#if os(macOS) || os(Linux)

    /// The tutorial's app, `itunes-lookup` (Examples/ITunesLookup), run as a person runs it: its
    /// exit status, what it prints, and Ctrl-C. It asks `Fixtures/server.py` (`/lookup?id=<id>`)
    /// through `--base-url`, except in the first test, which uses the answer built into the app.
    ///
    /// The tests are `async` and wait without holding up a thread of Swift's concurrency pool (a
    /// pool as small as the machine), which other suites' tasks need.
    @Suite struct ITunesLookupApp {
        @Test func worksOfflineFromTheAnswerBuiltIn() async throws {
            let run = try await App.run("909253")
            #expect(run.ending == .exit(0))
            #expect(run.stdout == "The Loud Ones\n")
        }

        @Test func printsTheRockArtist() async throws {
            let run = try await App.run("--base-url", try server.base, "909253")
            #expect(run.ending == .exit(0))
            #expect(run.stdout == "The Loud Ones\n")  // the fixture's rock artist, not its jazz one
            #expect(run.stderr.hasPrefix("Looking up artist 909253"))  // the progress line
            #expect(run.stderr.hasSuffix(" done waiting\n"))  // the `ensure` step
        }

        @Test func aMalformedIdIsRejectedBeforeTheLookupStarts() async throws {
            let run = try await App.run("--base-url", try server.base, "abc")
            #expect(run.ending == .exit(2))
            #expect(run.stdout.isEmpty)
            #expect(run.stderr == "error: not an artist id: give a number, such as 909253\n")
        }

        @Test(arguments: ["--help", "-h"]) func helpPrintsTheUsageAndExitsWith0(option: String)
            async throws
        {
            let run = try await App.run(option)
            #expect(run.ending == .exit(0))
            #expect(run.stdout.hasPrefix("usage: itunes-lookup"))
            #expect(run.stdout.contains("--timeout SECONDS"))
            #expect(run.stderr.isEmpty)
        }

        @Test func anHTTPErrorIsReportedWithItsStatusAndNotRetried() async throws {
            let run = try await App.run(
                "--retries", "2", "--base-url", try server.base + "/missing", "909253")  // 404
            #expect(run.ending == .exit(3))
            #expect(run.stderr.hasSuffix("error: the server answered HTTP 404\n"))  // one attempt
        }

        @Test func aServerErrorIsRetriedThenReportedWithItsStatus() async throws {
            let server = try self.server
            let before = server.stats()["lookup500"] ?? 0
            let run = try await App.run("--retries", "2", "--base-url", server.base, "500")
            #expect(run.ending == .exit(3))
            #expect(run.stderr.hasSuffix("error: the server answered HTTP 500 (3 attempts)\n"))
            #expect(server.stats()["lookup500"] == before + 3)  // the library's `retry`
        }

        @Test func retriesGetPastAFlakyServer() async throws {
            // The server fails two requests of every three for this id; three attempts get through.
            let run = try await App.run("--retries", "2", "--base-url", try server.base, "4")
            #expect(run.ending == .exit(0))
            #expect(run.stdout == "The Loud Ones\n")
        }

        @Test func aServerThatNeverAnswersEndsAtTheTimeout() async throws {
            let server = try self.server
            let before = server.stats()["silentClosed"] ?? 0
            // Id 9 answers after 10 minutes.
            let run = try await App.run("--timeout", "1", "--base-url", server.base, "9")
            #expect(run.ending == .exit(3))
            #expect(run.stderr.hasSuffix("error: no answer within 1 s (see --timeout)\n"))
            // The library's `timeout` cancelled the request: the client closed the connection
            // before the server answered, which it counts (a wall-clock bound here failed on a
            // loaded machine, where starting and reaping the app can take seconds).
            #expect(eventually { server.stats()["silentClosed"] == before + 1 })
        }

        @Test(arguments: ["0", "-1", "soon"]) func aBadTimeoutIsAUsageError(seconds: String)
            async throws
        {
            let run = try await App.run("--timeout", seconds, "909253")
            #expect(run.ending == .exit(1))
            #expect(run.stderr.hasPrefix("--timeout needs a number of seconds above 0"))
        }

        @Test func aMalformedResponseExitsWith4() async throws {
            let run = try await App.run("--base-url", try server.base, "1")  // HTML, not JSON
            #expect(run.ending == .exit(4))
            #expect(run.stderr.contains("error: the lookup answered with a malformed response"))
        }

        @Test func noRockArtistExitsWith5() async throws {
            let run = try await App.run("--base-url", try server.base, "100")  // a jazz artist
            #expect(run.ending == .exit(5))
            #expect(run.stderr.hasSuffix("error: no rock artist has the id 100\n"))
        }

        @Test func anUnknownIdSaysNoArtistHasItAndExitsWith6() async throws {
            let run = try await App.run("--base-url", try server.base, "3")  // no results
            #expect(run.ending == .exit(6))
            #expect(run.stdout.isEmpty)
            #expect(run.stderr.hasSuffix("error: no artist has the id 3\n"))
        }

        @Test func withoutAnIdItPrintsUsage() async throws {
            let run = try await App.run()
            #expect(run.ending == .exit(1))
            #expect(run.stderr.hasPrefix("usage: itunes-lookup"))
        }

        @Test func ctrlCCancelsTheRequestAndEnsureRuns() async throws {
            let server = try self.server
            let before = server.stats()
            let app = try App("--base-url", server.base, "2")  // answers after 10 minutes
            defer { app.kill() }
            // The app prints its progress line once it handles Ctrl-C; then the request arrives.
            try #require(eventually { app.standardError.hasPrefix("Looking up artist 2") })
            try #require(
                eventually { server.stats()["slowOpened"] == (before["slowOpened"] ?? 0) + 1 })

            app.interrupt()
            let run = await app.finish()
            #expect(run.ending == .exit(130))
            #expect(run.stdout.isEmpty)
            #expect(run.stderr.contains(" done waiting\n"))  // the `ensure` step
            #expect(run.stderr.hasSuffix("cancelled: Ctrl-C cancelled the request\n"))
            // The server saw the client close the connection without waiting for the answer.
            #expect(eventually { server.stats()["slowClosed"] == (before["slowClosed"] ?? 0) + 1 })
        }

        /// The suite's server: one for every test, started by the first that asks.
        var server: TestServer { get throws { try Self.sharedServer.get() } }
        private static let sharedServer = SharedServer()
    }

    /// A `TestServer` started once and kept: it stops as the test process ends and so closes the
    /// server's standard input. Only its port, fixed at the start, is read after.
    private final class SharedServer: @unchecked Sendable {
        private let lock = TestLock()
        private var server: TestServer?

        func get() throws -> TestServer {
            try lock.withLock {
                if let server { return server }
                let started = try TestServer()
                server = started
                return started
            }
        }
    }

    extension TestServer {
        /// The server's address, for `--base-url`.
        var base: String { url("").absoluteString }
    }

    /// A run of the `itunes-lookup` executable, its output read as it comes, on threads of its own.
    final class App: @unchecked Sendable {
        /// How a run ended.
        enum Ending: Equatable {
            case exit(Int32)
            case signal(Int32)
        }

        /// How a run ended (`nil`: not within `timeout`), and what it wrote.
        struct Run {
            let ending: Ending?
            let stdout: String
            let stderr: String
        }

        /// The executable: `swift build` and `swift test` build it in the directory that holds this
        /// test bundle's resources (`.build/debug`, or the same under any `--scratch-path`).
        static let executable = Bundle.module.bundleURL.deletingLastPathComponent()
            .appendingPathComponent("itunes-lookup")

        private let process = Process()
        private let output = Output()
        private let errors = Output()
        private let ended = Delivery<Ending>()

        /// Starts the app with `arguments`.
        convenience init(_ arguments: String...) throws { try self.init(arguments: arguments) }

        init(arguments: [String]) throws {
            try #require(
                FileManager.default.isExecutableFile(atPath: Self.executable.path),
                "\(Self.executable.path) is missing: build the package with its tests")
            process.executableURL = Self.executable
            process.arguments = arguments
            process.standardInput = FileHandle.nullDevice
            (process.standardOutput, process.standardError) = (output.pipe, errors.pipe)
            process.terminationHandler = { [ended] process in
                let status = process.terminationStatus
                ended.send(process.terminationReason == .exit ? .exit(status) : .signal(status))
            }
            try process.run()
            output.startReading()
            errors.startReading()
        }

        /// Runs the app with `arguments` to its end.
        static func run(_ arguments: String...) async throws -> Run {
            try await App(arguments: arguments).finish()
        }

        /// What the app has written to standard error so far.
        var standardError: String { errors.text }

        /// Presses Ctrl-C.
        func interrupt() { process.interrupt() }

        /// Ends the app if it still runs.
        func kill() { if process.isRunning { process.terminate() } }

        /// Waits, at most `timeout` each, for the app to exit and for its output to close.
        func finish() async -> Run {
            let ending = await ended.arrival()
            if ending == nil { kill() }
            _ = await (output.closed.arrival(), errors.closed.arrival())
            return Run(ending: ending, stdout: output.text, stderr: errors.text)
        }

        /// An output stream of the app, read until it closes.
        final class Output: @unchecked Sendable {
            let pipe = Pipe()
            let closed = Delivery<Void>()
            private let lock = TestLock()
            private var data = Data()

            var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }

            func startReading() {
                Thread {
                    let handle = self.pipe.fileHandleForReading
                    while case let chunk = handle.availableData, !chunk.isEmpty {
                        self.lock.withLock { self.data.append(chunk) }
                    }
                    self.closed.send(())
                }.start()
            }
        }
    }
#endif
