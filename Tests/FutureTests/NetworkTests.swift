import Foundation
import Future
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// These tests run processes, which macOS and Linux alone can.
#if os(macOS) || os(Linux)

    /// A failed HTTP status.
    struct HTTPStatusError: Error, Equatable {
        let code: Int
    }

    /// URLSession's data task as a promise: the pattern the README recommends. Cancelling the run
    /// cancels the request; a request cancelled elsewhere ends the run as cancelled.
    func fetch(
        _ url: URL, observe: @escaping @Sendable ((any Error)?) -> Void = { _ in }
    ) -> Promise<Data, any Error> {
        Promise { resolver in
            let task = URLSession.shared.dataTask(with: url) { data, response, error in
                observe(error)
                if let status = (response as? HTTPURLResponse)?.statusCode, status >= 300 {
                    return resolver.reject(HTTPStatusError(code: status))
                }
                resolver.resolve(
                    data, error, cancelledIf: { ($0 as? URLError)?.code == .cancelled })
            }
            resolver.onCancel { _ in task.cancel() }
            task.resume()
        }
    }

    /// `Fixtures/server.py` on 127.0.0.1, from the start of a test until `stop()`.
    final class TestServer {
        private let process = Process()
        private let input = Pipe()
        private let output = Pipe()
        let port: Int

        init() throws {
            let script = try #require(
                Bundle.module.path(forResource: "Fixtures/server", ofType: "py"))
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", script]
            (process.standardInput, process.standardOutput) = (input, output)
            try process.run()
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }  // the server ended before printing its port
                line.append(chunk)
            }
            port = try #require(
                Int(
                    String(decoding: line, as: UTF8.self).trimmingCharacters(
                        in: .whitespacesAndNewlines)))
        }

        func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

        /// The server's counts: requests to /flaky, clients that closed /slow early.
        func stats() -> [String: Int] { Self.stats(at: url("/stats")) }

        /// The counts of the server at `url`, its /stats, from any thread.
        static func stats(at url: URL) -> [String: Int] {
            guard let data = try? Data(contentsOf: url) else { return [:] }
            return (try? JSONDecoder().decode([String: Int].self, from: data)) ?? [:]
        }

        func stop() {
            try? input.fileHandleForWriting.close()
            process.terminate()
            process.waitUntilExit()
        }
    }

    struct Lookup: Decodable {
        struct Artist: Decodable { let artistName: String }
        let results: [Artist]
    }

    @Suite struct NetworkClient {
        @Test func aFetchSucceedsAndDecodes() throws {
            let server = try TestServer()
            defer { server.stop() }
            let names = fetch(server.url("/artist")).tryMap { (data) throws(any Error) in
                try JSONDecoder().decode(Lookup.self, from: data).results.map(\.artistName)
            }
            #expect(try outcome(of: names)?.get() == ["Jazz Ensemble", "The Loud Ones"])
        }

        /// Awaited, and the server polled from a thread of its own: a test that blocks a thread
        /// of the pool takes it from the alarm and from URLSession's cancel, which need it (in
        /// the whole suite, on a loaded machine, the close once came too late to count).
        @Test func aTimeoutCancelsTheRequest() async throws {
            let server = try TestServer()
            defer { server.stop() }
            let clientSaw = Delivery<URLError.Code?>()
            let slow = fetch(
                server.url("/slow"), observe: { clientSaw.send(($0 as? URLError)?.code) }
            )
            .timeout(.milliseconds(300))
            let outcome = await bounded { await slow.result }
            #expect(throws: PromiseError.timedOut) { try outcome??.get() }
            #expect(await clientSaw.arrival() == .cancelled)  // the client saw it cancelled
            let stats = server.url("/stats")
            let closed = Delivery<Bool>()  // the server saw it close
            detachThread {
                closed.send(eventually { TestServer.stats(at: stats)["slowClosed"] == 1 })
            }
            #expect(await closed.arrival() == true)
        }

        @Test func retryAsksAgainUntilTheServerAnswers() throws {
            let server = try TestServer()
            defer { server.stop() }
            let flaky = fetch(server.url("/flaky")).retry(3, delay: .milliseconds(10))
            #expect(try outcome(of: flaky)?.get().isEmpty == false)
            #expect(server.stats()["flaky"] == 3)
        }
    }
#endif
