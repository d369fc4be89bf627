// Sequences.swift: PromiseKit's helpers for a promise of a sequence. Builds on `map`
// (Chaining.swift) and on `when(fulfilled:concurrently:)` (Combining.swift).

// PromiseKit's helpers for a promise of a list: each a `map` or a `thenMap` of what a sequence
// does.
// (`SendableMetatype`: a step's closure, which may run on any thread, uses the sequence's type.)

nonisolated extension Promise where Value: Sequence & SendableMetatype {
    /// Transforms each element: a `map` of the sequence's `map`.
    ///
    /// For a list that comes from the step before: `fetchUsers().mapValues { $0.name }`.
    @inlinable public func mapValues<NewElement>(
        _ transform: @escaping @Sendable (Value.Element) -> NewElement
    ) -> Promise<[NewElement], Failure> { map { $0.map(transform) } }

    /// Transforms each element into a sequence and joins them in one array.
    ///
    /// For a list of lists, such as each album's tracks: `fetchAlbums().flatMapValues(\.tracks)`.
    @inlinable public func flatMapValues<Segment: Sequence & SendableMetatype>(
        _ transform: @escaping @Sendable (Value.Element) -> Segment
    ) -> Promise<[Segment.Element], Failure> { map { $0.flatMap(transform) } }

    /// Transforms each element, keeping the results that are not `nil`.
    ///
    /// For a list to parse, where what does not parse is dropped:
    /// `fetchLines().compactMapValues { Int($0) }`.
    @inlinable public func compactMapValues<NewElement>(
        _ transform: @escaping @Sendable (Value.Element) -> NewElement?
    ) -> Promise<[NewElement], Failure> { map { $0.compactMap(transform) } }

    /// Keeps the elements that `isIncluded` accepts, in order.
    ///
    /// `fetchUsers().filterValues { $0.isActive }`.
    @inlinable public func filterValues(
        _ isIncluded: @escaping @Sendable (Value.Element) -> Bool
    ) -> Promise<[Value.Element], Failure> { map { $0.filter(isIncluded) } }

    /// Makes a promise of each element and joins them in order: the step form of
    /// ``when(fulfilled:concurrently:)``.
    ///
    /// For a list that comes from the step before; `limit` caps how many run at once, and the
    /// first failure cancels the rest: `followers.thenMap(concurrently: 4) { avatar(of: $0) }`.
    public func thenMap<NewValue>(
        concurrently limit: Int = .max,
        _ transform: @escaping @Sendable (Value.Element) -> Promise<NewValue, Failure>
    ) -> Promise<[NewValue], Failure> {
        let limit = checkedLimit(limit, "thenMap(concurrently:_:)")
        return flatMap { when(fulfilled: $0.map(transform), concurrently: limit) }
    }

    /// Makes a promise of a sequence from each element, and joins their elements in one array.
    ///
    /// As ``thenMap(concurrently:_:)``, for steps that each give a list, such as a page of
    /// results per query: `queries.thenFlatMap { search($0) }`.
    public func thenFlatMap<Segment: Sequence & SendableMetatype>(
        concurrently limit: Int = .max,
        _ transform: @escaping @Sendable (Value.Element) -> Promise<Segment, Failure>
    ) -> Promise<[Segment.Element], Failure> {
        let limit = checkedLimit(limit, "thenFlatMap(concurrently:_:)")  // its own name
        return thenMap(concurrently: limit, transform).flatMapValues { $0 }
    }
}

nonisolated extension Promise where Value: Sequence & SendableMetatype, Value.Element: Comparable {
    /// Sorts the elements in increasing order: `fetchScores().sortedValues()`.
    @inlinable public func sortedValues() -> Promise<[Value.Element], Failure> {
        map { $0.sorted() }
    }
}

nonisolated extension Promise where Value: Sequence & SendableMetatype, Failure == any Swift.Error {
    /// The first element; fails with ``PromiseError/emptySequence`` if there is none.
    ///
    /// `fetchResults().firstValue`. On a chain with a typed error, say which error an empty
    /// sequence is: `results.compactMap(orFailWith: .noResultFound) { $0.first }`.
    @inlinable public var firstValue: Promise<Value.Element, Failure> {
        compactMap(orFailWith: PromiseError.emptySequence) { $0.first { _ in true } }
    }

    /// The last element; fails with ``PromiseError/emptySequence`` if there is none.
    ///
    /// `fetchMessages().lastValue`. On a chain with a typed error, use
    /// ``compactMap(orFailWith:_:)`` as ``firstValue`` says.
    @inlinable public var lastValue: Promise<Value.Element, Failure> {
        compactMap(orFailWith: PromiseError.emptySequence) { Array($0).last }
    }
}
