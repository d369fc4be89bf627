import Testing

@testable import Future

/// A `pending()` promise's resolver let go of unresolved is reported in debug builds "if a run is
/// waiting for it as it goes": a combination's member that waits for it and that the
/// combination has cancelled no longer waits, though its cancel handler, which leaves, may not
/// have run yet (the members' handlers run one after another, in input order).
@Suite struct DebugReportsOfMembersCancelledByTheirCombination {
    typealias Kept = DebugReportsOfRunsCancelledInsideACancelHandler.Kept<Int>

    /// A race of three: a member whose cancel handler lets go of the pending promise's resolver,
    /// the pending promise, called directly as an operation alone, and a value, which wins at once
    /// and cancels the other two, the first one's handler first.
    @Test func aPendingResolverLetGoOfByAnEarlierMembersCancelHandlerIsNotReported() {
        _ = reports  // listening from now on
        let pending = Kept()
        let first = Kept()
        let line = #line + 1
        let promise = DebugReportsOfRunsCancelledInsideACancelHandler.pending(keptIn: pending)
        let letsGo = Guarantee<Int> { resolver in
            first.resolver = resolver  // so that it waits
            resolver.onCancel { _ in pending.resolver = nil }
        }
        #expect(value(of: race([letsGo, promise, Guarantee(value: 3)])) == 3)
        #expect(pending.resolver == nil, "the first member's handler ran")
        #expect(reports.reports(madeAt: line).isEmpty)
    }
}
