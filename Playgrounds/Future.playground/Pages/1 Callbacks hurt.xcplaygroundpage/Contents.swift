//: # Callbacks hurt
//:
//: The iTunes lookup of the tutorial Future grew from, written with completion handlers: look an
//: artist up, turn the JSON into a dictionary, the dictionary into a model, and keep the rock
//: artist. Every step that can fail nests one level deeper and handles its errors once more.
//: Lines that start with `//>` show what the page prints.
//:
//: The playground needs Xcode 26 or later: the library, in its Sources folder, needs Swift 6.2.

import Dispatch
import Foundation

enum LookupError: Error { case requestFailed, malformed, noRockArtist }

/// Stands in for the network: answers from a copy of the store's answer, a moment later.
func lookUp(id: String, completion: @escaping @Sendable (Data?, (any Error)?) -> Void) {
    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) {
        guard id == "909253" else { return completion(nil, LookupError.requestFailed) }
        completion(
            Data(#"{"results": [{"artistName": "The Loud Ones", "genre": "Rock"}]}"#.utf8), nil)
    }
}

func rockArtist(id: String, completion: @escaping @Sendable (Result<String, LookupError>) -> Void) {
    lookUp(id: id) { data, error in
        if let data, error == nil {
            if let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any] {
                if let results = json["results"] as? [[String: String]] {
                    if let rock = results.first(where: { $0["genre"] == "Rock" }),
                        let name = rock["artistName"]
                    {
                        completion(.success(name))
                    } else {
                        completion(.failure(.noRockArtist))
                    }
                } else {
                    completion(.failure(.malformed))
                }
            } else {
                completion(.failure(.malformed))
            }
        } else {
            completion(.failure(.requestFailed))
        }
    }
}

//: A playground page ends while the work goes on elsewhere: each lookup here waits for its answer.
func waitFor(_ start: (@escaping @Sendable (Result<String, LookupError>) -> Void) -> Void) {
    let answered = DispatchSemaphore(value: 0)
    start { outcome in
        switch outcome {
        case .success(let name): print("found", name)
        case .failure(let error): print("failed:", error)
        }
        answered.signal()
    }
    answered.wait()
}

waitFor { rockArtist(id: "909253", completion: $0) }
//> found The Loud Ones
waitFor { rockArtist(id: "1", completion: $0) }
//> failed: requestFailed

//: The shape is the problem: the steps are not functions you can name, test and reuse, and the
//: error handling is written again at every level. [Next: a promise in 30 lines](@next)
