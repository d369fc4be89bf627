// Seed 004's iTunes pipeline as the tutorial writes it, with free functions, compiled by .ci/run in
// Swift 6 mode with warnings as errors. What changed: `Result` is `Swift.Result` (`.success` and
// `.failure` for the tutorial's `.Some` and `.None`), the error type conforms to `Swift.Error`, and
// Swift 3 spellings (`URLSession.shared()`, `guard let a = …, b = …`) are today's.

import Foundation
import Future

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// swift-format-ignore: AlwaysUseLowerCamelCase
// The tutorial's own case names.
enum Error: String, Swift.Error {
    case NoUrl
    case RequestFailed
    case parsingJsonFailed
    case dictionaryWrongFormat
    case invalidJson
    case noResultFound
}

func iTunesLookUp(id: String) -> Promise<Data, Error> {
    return Promise<Data, Error> { callback in
        guard let url = URL(string: "https://itunes.apple.com/lookup?id=\(id)") else {
            callback(.failure(.NoUrl))
            return
        }

        let request = URLRequest(url: url)
        let session = URLSession.shared

        session.dataTask(with: request) { (data, response, error) in

            if let data = data, error == nil {
                callback(.success(data))
            } else {
                callback(.failure(.RequestFailed))
            }

        }.resume()
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

struct ItunesLookupResponseModel {
    let resultCount: Int
    let results: [ItunesLookupResultResponseModel]

    init?(dict: [String: AnyObject]) {
        guard let resultCount = dict["resultCount"] as? Int,
            let results = dict["results"] as? [[String: AnyObject]]
        else {
            return nil
        }

        self.results = results.compactMap {
            return ItunesLookupResultResponseModel(dict: $0)
        }
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

    let results = model.results.filter {
        return $0.primaryGenreName == "Rock"
    }

    if let result = results.first {
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

func lookUpTheLoudOnes() {
    iTunesLookUp(id: "909253")
        .then(toDictionary)
        .then(toModel)
        .then(filterModels)
        .run(some: printName, none: error)
}
