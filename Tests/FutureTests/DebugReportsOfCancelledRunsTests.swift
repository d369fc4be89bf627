import Testing

@testable import Future

/// The debug report of a resolver let go of unresolved is made for a call that can never finish,
/// never for one whose run was cancelled (`Resolver`: "An operation that lets its resolver go
/// without resolving it or calling `cancel()` can never finish: its run is cancelled, and debug
/// builds report where the promise was made"; `pending()`: reported "if a run is waiting for it
/// as it goes, but not one of a promise made and never run (or no longer)"). A run cancelled
/// inside a cancel handler is cancelled as `cancel()` returns (`isCancelled` says so), though its
/// own handlers come after the handler: a run's own call is not reported then (the control, in
/// the comment of each test), but a combination's member called directly, a pending promise's
/// resolver, and the work of a shared promise that only that run waited for, were, before the fix.
@Suite struct DebugReportsOfRunsCancelledInsideACancelHandler {
    final class Handle: @unchecked Sendable { var handle: RunHandle? }
    final class Kept<Value>: @unchecked Sendable { var resolver: Resolver<Value, Never>? }

    /// Runs an operation that lets its resolver go, so cancelling its own run; its cancel handler
    /// cancels `run`, records whether `run` was cancelled as `cancel()` returned, then lets go of
    /// the resolver `kept` holds.
    static func cancel(
        _ run: Handle, insideACancelHandlerThenLetGoOf kept: Kept<Int>, seen: Counter = Counter()
    ) {
        Guarantee<Int> { resolver in
            resolver.onCancel { _ in
                run.handle?.cancel()
                if run.handle?.isCancelled == true { seen.increment() }
                kept.resolver = nil
            }
        }.run()
    }

    static func pending(
        keptIn kept: Kept<Int>, file: StaticString = #fileID, line: UInt = #line
    ) -> Guarantee<Int> {
        let (promise, resolver) = Guarantee<Int>.pending(file: file, line: line)
        kept.resolver = resolver
        return promise
    }

    /// A combination's member, an operation alone, whose resolver is let go of after the
    /// combination's run was cancelled: its run is cancelled, so nothing is lost, yet the report
    /// said (before its fix) that the member "can never finish, so it was cancelled". (With
    /// `member.map { $0 }` run alone in place of the combination, no report is made.)
    @Test func aMembersResolverLetGoOfAfterItsCombinationsRunWasCancelledIsNotReported() {
        _ = reports  // listening from now on
        let run = Handle()
        let kept = Kept<Int>()
        let cancelledAsItWasLetGoOf = Counter()
        let line = #line + 1
        let member = Guarantee<Int> { kept.resolver = $0 }
        run.handle = when(fulfilled: [member]).run { _ in }
        Self.cancel(run, insideACancelHandlerThenLetGoOf: kept, seen: cancelledAsItWasLetGoOf)
        #expect(cancelledAsItWasLetGoOf.value == 1)
        #expect(run.handle?.isCancelled == true)
        #expect(reports.reports(madeAt: line).isEmpty)
    }

    /// A pending promise's resolver let go of after the only run waiting for it was cancelled:
    /// no run waits, yet it was reported (before its fix). (With the run cancelled outside a
    /// cancel handler, no report is made.)
    @Test func aPendingResolverLetGoOfAfterItsOnlyRunWasCancelledIsNotReported() {
        _ = reports  // listening from now on
        let run = Handle()
        let kept = Kept<Int>()
        let cancelledAsItWasLetGoOf = Counter()
        let line = #line + 1
        let promise = Self.pending(keptIn: kept)  // only `kept` holds the resolver
        run.handle = promise.run { _ in }
        Self.cancel(run, insideACancelHandlerThenLetGoOf: kept, seen: cancelledAsItWasLetGoOf)
        #expect(cancelledAsItWasLetGoOf.value == 1)
        #expect(run.handle?.isCancelled == true)
        #expect(reports.reports(madeAt: line).isEmpty)
    }

    /// The work of a shared promise that cancels when abandoned, whose only waiting run was
    /// cancelled inside a cancel handler, lets its resolver go: the work is abandoned, so nothing
    /// is lost. (With the run cancelled outside a cancel handler, no report is made.)
    @Test func aSharedWorksResolverLetGoOfAfterItsOnlyRunWasCancelledIsNotReported() {
        _ = reports  // listening from now on
        let run = Handle()
        let kept = Kept<Int>()
        let line = #line + 1
        let shared = Guarantee<Int> { kept.resolver = $0 }.share()
        run.handle = shared.run { _ in }
        Self.cancel(run, insideACancelHandlerThenLetGoOf: kept)
        #expect(run.handle?.isCancelled == true)
        #expect(reports.reports(madeAt: line).isEmpty)
    }
}
