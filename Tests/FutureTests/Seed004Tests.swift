import Dispatch
import Foundation
import Future
import Testing

/// The iTunes pipeline from the tutorial Future grew from (seed 004), against a JSON fixture
/// instead of the network. It reads as in the tutorial except for `Result`'s case names.
enum ITunes {
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

    /// Stands in for the network: answers from the fixture, later, on another thread.
    static func iTunesLookUp(id: String) -> Promise<Data, Error> {
        return Promise<Data, Error> { callback in
            guard
                let url = Bundle.module.url(
                    forResource: "Fixtures/itunes-lookup", withExtension: "json"),
                id == "909253"
            else {
                callback(.failure(.NoUrl))
                return
            }
            DispatchQueue.global().async {
                if let data = try? Data(contentsOf: url) {
                    callback(.success(data))
                } else {
                    callback(.failure(.RequestFailed))
                }
            }
        }
    }

    static func toDictionary(from data: Data) -> Result<[String: AnyObject], Error> {
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

    static func toModel(from dict: [String: AnyObject]) -> Result<ItunesLookupResponseModel, Error>
    {
        if let model = ItunesLookupResponseModel(dict: dict) {
            return .success(model)
        } else {
            return .failure(.invalidJson)
        }
    }

    static func filterModels(model: ItunesLookupResponseModel) -> Result<
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
}

@Suite struct Seed004 {
    @Test func theITunesPipelineReadsAsInTheTutorial() {
        let names = Delivery<String>()
        let errors = Delivery<ITunes.Error>()
        @Sendable func printName(model: ITunes.ItunesLookupResultResponseModel) {
            names.send(model.artistName)
        }
        @Sendable func error(error: ITunes.Error) { errors.send(error) }

        ITunes.iTunesLookUp(id: "909253")
            .then(ITunes.toDictionary)
            .then(ITunes.toModel)
            .then(ITunes.filterModels)
            .run(some: printName, none: error)

        #expect(names.wait() == "The Loud Ones")
        #expect(errors.all.isEmpty)
    }

    @Test func theFirstErrorEndsThePipeline() {
        let errors = Delivery<ITunes.Error>()
        ITunes.iTunesLookUp(id: "0")
            .then(ITunes.toDictionary)
            .then(ITunes.toModel)
            .then(ITunes.filterModels)
            .run(some: { _ in Issue.record("no artist expected") }, none: errors.send)
        #expect(errors.wait() == .NoUrl)
    }

    @Test func aDictionaryWithoutTheFieldsIsInvalidJson() {
        let promise = Promise<Data, ITunes.Error>(value: Data(#"{"results": 3}"#.utf8))
            .then(ITunes.toDictionary)
            .then(ITunes.toModel)
        let errors = Delivery<ITunes.Error>()
        promise.run(some: { _ in Issue.record("no model expected") }, none: errors.send)
        #expect(errors.wait() == .invalidJson)
    }
}
