// The lazy promise of the tutorial Future grew from (seed 004), brought to Swift 6 and
// `Swift.Result` and changed in nothing else: each `then` nests the previous run in a closure.
// It lives in its own module, as a user's copy would, so that it is measured the same way.

public struct SeedPromise<T, E: Error> {
    public typealias CompletionCallback = (Result<T, E>) -> Void

    let operation: (@escaping CompletionCallback) -> Void

    public init(_ operation: @escaping (@escaping CompletionCallback) -> Void) {
        self.operation = operation
    }

    public func run(onCompletion: @escaping CompletionCallback) {
        operation { onCompletion($0) }
    }

    public func run(some: @escaping (T) -> Void, none: @escaping (E) -> Void) {
        run {
            switch $0 {
            case .success(let value): some(value)
            case .failure(let error): none(error)
            }
        }
    }
}

extension SeedPromise {
    public func then<U>(_ f: @escaping (T) -> U) -> SeedPromise<U, E> {
        SeedPromise<U, E> { completion in
            self.run { result in
                switch result {
                case .success(let value): completion(.success(f(value)))
                case .failure(let error): completion(.failure(error))
                }
            }
        }
    }

    public func then<U>(_ f: @escaping (T) -> SeedPromise<U, E>) -> SeedPromise<U, E> {
        SeedPromise<U, E> { completion in
            self.run { result in
                switch result {
                case .success(let value): f(value).run(onCompletion: completion)
                case .failure(let error): completion(.failure(error))
                }
            }
        }
    }

    public func then<U>(_ f: @escaping (T) -> Result<U, E>) -> SeedPromise<U, E> {
        SeedPromise<U, E> { completion in
            self.run { result in
                switch result {
                case .success(let value): completion(f(value))
                case .failure(let error): completion(.failure(error))
                }
            }
        }
    }
}
