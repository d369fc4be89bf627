//: # The iTunes pipeline with Future
//:
//: The tutorial's pipeline, word for word but for `Result`'s case names and how it ends, on the
//: real library:
//: and now the lookup can be cancelled, timed out or retried, and the chain can be as long as a
//: loop needs. (The lookup answers from a copy of the store's answer, a moment later.)

import Dispatch
import Foundation

// swift-format-ignore: AlwaysUseLowerCamelCase
// The tutorial's own case names.
enum Error: Swift.Error {
    case NoUrl
    case RequestFailed
    case parsingJsonFailed
    case dictionaryWrongFormat
    case invalidJson
    case noResultFound
}

let storeAnswer = #"""
    {"resultCount": 2, "results": [
        {"artistId": 100, "artistName": "Jazz Ensemble", "primaryGenreName": "Jazz"},
        {"artistId": 909253, "artistName": "The Loud Ones", "primaryGenreName": "Rock"}]}
    """#

func iTunesLookUp(id: String) -> Promise<Data, Error> {
    return Promise<Data, Error> { callback in
        guard Int(id) != nil else {
            callback(.failure(.NoUrl))
            return
        }
        DispatchQueue.global().async {
            callback(.success(Data((id == "909253" ? storeAnswer : "{}").utf8)))
        }
    }
}

func toDictionary(from data: Data) -> Result<[String: AnyObject], Error> {
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

struct ItunesLookupResultResponseModel {
    let artistName: String
    let primaryGenreName: String

    init?(dict: [String: AnyObject]) {
        guard let artistName = dict["artistName"] as? String,
            let primaryGenreName = dict["primaryGenreName"] as? String
        else { return nil }
        self.artistName = artistName
        self.primaryGenreName = primaryGenreName
    }
}

struct ItunesLookupResponseModel {
    let results: [ItunesLookupResultResponseModel]

    init?(dict: [String: AnyObject]) {
        guard let results = dict["results"] as? [[String: AnyObject]] else { return nil }
        self.results = results.compactMap { ItunesLookupResultResponseModel(dict: $0) }
    }
}

func toModel(from dict: [String: AnyObject]) -> Result<ItunesLookupResponseModel, Error> {
    if let model = ItunesLookupResponseModel(dict: dict) {
        return .success(model)
    } else {
        return .failure(.invalidJson)
    }
}

func filterModels(model: ItunesLookupResponseModel) -> Result<
    ItunesLookupResultResponseModel, Error
> {
    if let result = model.results.first(where: { $0.primaryGenreName == "Rock" }) {
        return .success(result)
    }
    return .failure(.noResultFound)
}

func printName(model: ItunesLookupResultResponseModel) {
    print(model.artistName)
}

func error(error: Error) {
    print(error)
}

//: The tutorial's `run(some: printName, none: error)` starts the run and returns; to wait for it,
//: the page ends the chain with `done` and `catch` instead, and awaits it.

await iTunesLookUp(id: "909253")
    .then(toDictionary)
    .then(toModel)
    .then(filterModels)
    .done(printName)
    .catch(error)
    .value
//> The Loud Ones

await iTunesLookUp(id: "1")
    .then(toDictionary)
    .then(toModel)
    .then(filterModels)
    .done(printName)
    .catch(error)
    .value
//> invalidJson

//: And with what the real one adds: a timeout, a retry, and an await.
let artist = iTunesLookUp(id: "909253").then(toDictionary).then(toModel).then(filterModels)
    .timeout(.seconds(5), orFailWith: .RequestFailed)
    .retry(2)
print(try await artist.value?.artistName ?? "cancelled")
//> The Loud Ones
