// The tutorial's app (seed 004): look an artist up in the iTunes store, turn the JSON into a
// dictionary, the dictionary into a model, keep the first rock artist, and print its name.
//
//   swift run itunes-lookup 909253                     # from the answer built into this file
//   swift run itunes-lookup --live 909253              # from the real iTunes lookup API
//   swift run itunes-lookup --base-url URL 909253      # from any server: URL/lookup?id=909253
//   swift run itunes-lookup --timeout 3 --retries 2 --live 909253
//
// The name goes to standard output; the progress line and the errors go to standard error, and
// `--help` prints the usage. Each request gives up after `--timeout` seconds (10 by default), and
// a request that failed for want of an answer, or with an HTTP 5xx status, is tried again
// `--retries` times (none by default): the library's `timeout` and `retry`.
// Exit status: 0 found, 1 usage, 2 bad id, 3 request failed (no answer in time, or an HTTP
// error), 4 malformed response, 5 no rock artist, 6 no artist, 130 cancelled (Ctrl-C cancels the
// run: the request is cancelled, `ensure` runs).

import Dispatch
import Foundation
import Future

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// MARK: - The pipeline, as the tutorial writes it

// swift-format-ignore: AlwaysUseLowerCamelCase
// The tutorial's own case names.
enum LookupError: Error {
    case NoUrl
    case RequestFailed
    case parsingJsonFailed
    case dictionaryWrongFormat
    case invalidJson
    case noResultFound
    // What the command adds to the tutorial's cases, to say what went wrong.
    case httpStatus(Int)
    case timedOut
    case noArtistFound

    /// Whether trying again may help: no answer, or a server error, but not a client's.
    var isTransient: Bool {
        switch self {
        case .RequestFailed, .timedOut: true
        case .httpStatus(let status): status >= 500
        default: false
        }
    }
}

/// Where the answers come from.
enum Source {
    /// The answer built into this file, a moment later, as if from the network.
    case builtIn
    /// An HTTP server that answers `<base>/lookup?id=<id>`, such as `https://itunes.apple.com`.
    case server(base: String)
}

func iTunesLookUp(id: String, from source: Source) -> Promise<Data, LookupError> {
    guard !id.isEmpty, id.allSatisfy({ "0123456789".contains($0) }) else {
        return Promise(error: .NoUrl)
    }
    switch source {
    case .builtIn:
        let answer = id == "909253" ? builtInAnswer : #"{"resultCount": 0, "results": []}"#
        return Promise(value: Data(answer.utf8)).delay(.milliseconds(600))
    case .server(let base):
        return Promise<Data, LookupError> { callback in
            guard let url = URL(string: "\(base)/lookup?id=\(id)") else {
                callback(.failure(.NoUrl))
                return
            }
            let task = URLSession.shared.dataTask(with: URLRequest(url: url)) {
                data, response, error in
                let status = (response as? HTTPURLResponse)?.statusCode
                if let data, error == nil, let status, (200..<300).contains(status) {
                    callback(.success(data))
                } else if (error as? URLError)?.code == .cancelled {
                    callback.cancel()  // the run was cancelled: nothing to report
                } else if error == nil, let status {
                    callback(.failure(.httpStatus(status)))
                } else {
                    callback(.failure(.RequestFailed))
                }
            }
            // Cancelling the run (Ctrl-C, below) cancels the request.
            callback.onCancel { _ in task.cancel() }
            task.resume()
        }
    }
}

func toDictionary(from data: Data) -> Result<[String: AnyObject], LookupError> {
    do {
        if let dict = try JSONSerialization.jsonObject(with: data, options: .mutableContainers)
            as? [String: AnyObject]
        {
            return .success(dict)
        } else {
            return .failure(.dictionaryWrongFormat)
        }
    } catch {
        return .failure(.parsingJsonFailed)
    }
}

struct ItunesLookupResponseModel {
    let resultCount: Int
    let results: [ItunesLookupResultResponseModel]

    init?(dict: [String: AnyObject]) {
        guard let resultCount = dict["resultCount"] as? Int,
            let results = dict["results"] as? [[String: AnyObject]]
        else {
            return nil
        }
        self.results = results.compactMap { ItunesLookupResultResponseModel(dict: $0) }
        self.resultCount = resultCount
    }
}

struct ItunesLookupResultResponseModel {
    let artistId: Int
    let artistName: String
    let primaryGenreName: String

    init?(dict: [String: AnyObject]) {
        guard let artistId = dict["artistId"] as? Int,
            let artistName = dict["artistName"] as? String,
            let primaryGenreName = dict["primaryGenreName"] as? String
        else {
            return nil
        }
        self.artistId = artistId
        self.artistName = artistName
        self.primaryGenreName = primaryGenreName
    }
}

func toModel(from dict: [String: AnyObject]) -> Result<ItunesLookupResponseModel, LookupError> {
    if let model = ItunesLookupResponseModel(dict: dict) {
        return .success(model)
    } else {
        return .failure(.invalidJson)
    }
}

func filterModels(
    model: ItunesLookupResponseModel
) -> Result<ItunesLookupResultResponseModel, LookupError> {
    if model.results.isEmpty { return .failure(.noArtistFound) }
    let results = model.results.filter {
        return $0.primaryGenreName == "Rock"
    }
    if let result = results.first {
        return .success(result)
    }
    return .failure(.noResultFound)
}

// The tutorial's two ends of the chain; a command also says how it ended, with its exit status.

func printName(model: ItunesLookupResultResponseModel) {
    print(model.artistName)
    exit(0)
}

/// What the command tells the user, given the failure of the lookup of artist `id`.
func error(error: LookupError, id: String, timeout: String, attempts: Int) {
    let tries = error.isTransient && attempts > 1 ? " (\(attempts) attempts)" : ""
    let (message, status): (String, Int32) =
        switch error {
        case .NoUrl: (notAnId, 2)
        case .RequestFailed: ("the lookup request failed: the server could not be reached", 3)
        case .httpStatus(let code): ("the server answered HTTP \(code)", 3)
        case .timedOut: ("no answer within \(timeout) s (see --timeout)", 3)
        case .parsingJsonFailed, .dictionaryWrongFormat, .invalidJson:
            ("the lookup answered with a malformed response (\(error))", 4)
        case .noResultFound: ("no rock artist has the id \(id)", 5)
        case .noArtistFound: ("no artist has the id \(id)", 6)
        }
    note("error: \(message)\(tries)\n")
    exit(status)
}

let notAnId = "not an artist id: give a number, such as 909253"

// MARK: - The answer built in

/// What the iTunes lookup API answers for artist 909253: a copy of the tests' fixture,
/// Tests/FutureTests/Fixtures/itunes-lookup.json.
let builtInAnswer = #"""
    {
      "resultCount": 2,
      "results": [
        {
          "wrapperType": "artist",
          "artistType": "Artist",
          "artistName": "Jazz Ensemble",
          "artistLinkUrl": "https://music.example/artist/jazz-ensemble/100",
          "artistId": 100,
          "amgArtistId": 1000,
          "primaryGenreName": "Jazz",
          "primaryGenreId": 11
        },
        {
          "wrapperType": "artist",
          "artistType": "Artist",
          "artistName": "The Loud Ones",
          "artistLinkUrl": "https://music.example/artist/the-loud-ones/909253",
          "artistId": 909253,
          "amgArtistId": 468749,
          "primaryGenreName": "Rock",
          "primaryGenreId": 21
        }
      ]
    }
    """#

// MARK: - The command

/// Writes `text` to standard error, at once.
func note(_ text: String) { FileHandle.standardError.write(Data(text.utf8)) }

/// A dot on the progress line every fifth of a second, until its run is cancelled. (`@Sendable`
/// because a step of its promise calls it.)
@Sendable func progress() -> Guarantee<Void> {
    after(.milliseconds(200)).on(.main).map { note(".") }.then { progress() }
}

let usage = """
    usage: itunes-lookup [--live | --base-url URL] [--timeout SECONDS] [--retries N] ARTIST-ID
      ARTIST-ID          an iTunes artist id, such as 909253
      --live             ask the iTunes lookup API (by default, an answer built into the app)
      --base-url URL     ask the server at URL: URL/lookup?id=ARTIST-ID
      --timeout SECONDS  give up on a request after SECONDS (default 10)
      --retries N        try a request that got no answer, or an HTTP 5xx, N times more (default 0)
      -h, --help         print this and exit

    """
var source = Source.builtIn
var ids: [String] = []
var timeout = "10"
var retries = 0
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "-h", "--help":
        print(usage, terminator: "")
        exit(0)
    case "--timeout":
        guard let seconds = arguments.popFirst(), let value = Double(seconds), value > 0,
            value <= 86_400
        else {
            note("--timeout needs a number of seconds above 0, such as 10\n" + usage)
            exit(1)
        }
        timeout = seconds
    case "--retries":
        guard let count = arguments.popFirst().flatMap({ Int($0) }), (0...100).contains(count)
        else {
            note("--retries needs a number from 0 to 100\n" + usage)
            exit(1)
        }
        retries = count
    case "--live":
        source = .server(base: "https://itunes.apple.com")
    case "--base-url":
        guard var base = arguments.popFirst(),
            base.hasPrefix("http://") || base.hasPrefix("https://")
        else {
            note("--base-url needs an http:// or https:// URL\n" + usage)
            exit(1)
        }
        while base.hasSuffix("/") { base.removeLast() }
        source = .server(base: base)
    case _ where argument.hasPrefix("--"):
        note("unknown option \(argument)\n" + usage)
        exit(1)
    default:
        ids.append(argument)
    }
}
guard ids.count == 1, let id = ids.first else {
    note(usage)
    exit(1)
}
// A malformed id is the user's mistake, told at once, before the lookup starts.
guard !id.isEmpty, id.allSatisfy({ "0123456789".contains($0) }) else {
    note("error: \(notAnId)\n")
    exit(2)
}

// Everything that prints or exits from here on does so on the main queue, one thing at a time,
// once `dispatchMain()` below runs it: the progress dots, the rest of the pipeline, and Ctrl-C.
// (No top-level `await` comes before it: after one, libdispatch stops the program at
// `dispatchMain()`.)
// So the progress line comes first, and Ctrl-C either cancels the run or comes too late to.

let dots = progress().run()
let (seconds, attempts) = (Double(timeout)!, retries + 1)
let lookup = iTunesLookUp(id: id, from: source)
    // A request that gets no answer in time is cancelled; one that failed for want of an answer
    // is made again, after a pause, up to `attempts` times in all.
    .timeout(.milliseconds(Int(seconds * 1000)), orFailWith: .timedOut)
    .retry(attempts, delay: .milliseconds(500), while: { $0.isTransient })
    .on(.main)
    .then(toDictionary)
    .then(toModel)
    .then(filterModels)
    .ensure {
        dots.cancel()
        note(" done waiting\n")
    }
    .run(
        some: printName,
        none: { [timeout] in error(error: $0, id: id, timeout: timeout, attempts: attempts) })

// Ctrl-C cancels the run: the request is cancelled, and the `ensure` step above runs before
// `cancel()` returns (the run is waiting: for the answer, or for the main queue).
let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .main)
interrupt.setEventHandler {
    lookup.cancel()
    note("cancelled: Ctrl-C cancelled the request\n")
    exit(130)
}
signal(SIGINT, SIG_IGN)  // the source above hears it instead
interrupt.resume()

note("Looking up artist \(id)")
dispatchMain()
