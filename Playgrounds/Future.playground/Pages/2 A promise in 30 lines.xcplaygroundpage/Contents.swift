//: # A promise in 30 lines
//:
//: The tutorial's lazy promise, from nothing: a struct around an operation that runs only when
//: `run` is called, with three `then`s, for a step that returns a value, a promise, or a
//: `Result`. (This page's `Promise` hides the library's, which the next pages use.)

import Foundation

struct Promise<T, E: Error> {
    let operation: (@escaping (Result<T, E>) -> Void) -> Void

    func run(_ completion: @escaping (Result<T, E>) -> Void) { operation(completion) }

    func run(some: @escaping (T) -> Void, none: @escaping (E) -> Void) {
        run { result in
            switch result {
            case .success(let value): some(value)
            case .failure(let error): none(error)
            }
        }
    }

    func then<U>(_ f: @escaping (T) -> U) -> Promise<U, E> {
        Promise<U, E> { completion in run { completion($0.map(f)) } }
    }

    func then<U>(_ f: @escaping (T) -> Result<U, E>) -> Promise<U, E> {
        Promise<U, E> { completion in run { completion($0.flatMap(f)) } }
    }

    func then<U>(_ f: @escaping (T) -> Promise<U, E>) -> Promise<U, E> {
        Promise<U, E> { completion in
            run { result in
                switch result {
                case .success(let value): f(value).run(completion)
                case .failure(let error): completion(.failure(error))
                }
            }
        }
    }
}

//: Now the pipeline is a list of small functions, each one step.

enum LookupError: Error { case requestFailed, malformed, noRockArtist }

func lookUp(id: String) -> Promise<Data, LookupError> {
    Promise { callback in
        guard id == "909253" else { return callback(.failure(.requestFailed)) }
        callback(
            .success(Data(#"{"results": [{"artistName": "The Loud Ones", "genre": "Rock"}]}"#.utf8))
        )
    }
}

func toDictionary(_ data: Data) -> Result<[String: Any], LookupError> {
    (try? JSONSerialization.jsonObject(with: data) as? [String: Any]).map { .success($0) }
        ?? .failure(.malformed)
}

func toArtists(_ dictionary: [String: Any]) -> Result<[[String: String]], LookupError> {
    (dictionary["results"] as? [[String: String]]).map { .success($0) } ?? .failure(.malformed)
}

func rockArtist(_ artists: [[String: String]]) -> Result<String, LookupError> {
    artists.first { $0["genre"] == "Rock" }?["artistName"].map { .success($0) }
        ?? .failure(.noRockArtist)
}

let pipeline = lookUp(id: "909253").then(toDictionary).then(toArtists).then(rockArtist)
print("nothing has run yet")
pipeline.run(some: { print("found", $0) }, none: { print("failed:", $0) })
//> nothing has run yet
//> found The Loud Ones
lookUp(id: "1").then(toDictionary).then(toArtists).then(rockArtist)
    .run(some: { print("found", $0) }, none: { print("failed:", $0) })
//> failed: requestFailed

//: Thirty lines, and it reads like the tutorial. [Next: why the real one is different](@next)
