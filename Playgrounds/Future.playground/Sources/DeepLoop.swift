// The loop of the page "Why the real one is different". It is here, not on the page, because
// Xcode records every expression a page evaluates for its results sidebar: a million steps
// written on the page would run for a very long time there.

/// A loop that goes on through `then`, `n` steps, down to 0.
public func loop(_ n: Int) -> Guarantee<Int> {
    n == 0 ? .value(0) : Guarantee(value: n).then { loop($0 - 1) }
}
