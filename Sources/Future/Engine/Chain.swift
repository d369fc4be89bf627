// Engine/Chain.swift: the engine, first file: how a chain is stored, and the two primitives that
// add a step to one. The engine's other files: Run.swift (a run, its states, and what gets its
// outcome), Join.swift (combinations), Timeout.swift (`timeout`), Shared.swift (`share()` and
// `pending()`), Nesting.swift (runs and releases nested on one stack), Deadlines.swift (Dispatch's
// time: hops and alarms), Timeline.swift (a clock's time), MainActor.swift and Lock.swift.
//
// Glossary: one meaning a word, in these files.
// - chain: the stages of a promise, linked from its last to its first, so that promises built on
//   the same one share it.
// - stage: a step as stored (`Stage`); a `Node` adds what the step keeps, usually your closure,
//   an `Entry` the closure of a step that enters the promise it makes, a `Source` an operation.
// - step: what a stage does when a run reaches it (`Stage.Step`): it takes its input from the
//   slot, leaves its output there, and says what comes `Next`.
// - operation: the closure a promise is made from, called with a resolver. A promise of an
//   operation alone keeps the `Operation`; a `Source` stage keeps it once a step is added.
// - call: one call of an operation in a run. A run numbers its calls; a resolver carries its
//   call's number, so that the resolver of an earlier call counts for nothing. (A join numbers
//   the members it calls by their index.)
// - run: one execution of a chain, which a terminal starts and a `RunHandle` refers to.
// - drive: take a run's steps one after another; one thread at a time drives a run.
// - slot: the run's memory, where a step's output waits for the next step (and a promise's
//   operation alone waits for the run's first drive).
// - plan: the stages a run has still to take, on a stack (`Plan`): its chain's, every one of
//   them, loaded as it starts, then those of the chains its steps enter.
// - enter: push the stages of a promise that a step returned onto the plan, rather than run it
//   nested: so no step grows the thread's stack. (A promise of an operation alone is called in
//   place: a step that returns a promise calls or enters it, `Run.callOrEnter`.)
// - hop: a step's request that the run go on on a queue, perhaps at a deadline (`Next.hop`).
// - alarm: what a `timeout` races its work against, set on a clock once the work waits.
// - The four verbs of stopping, one meaning each: `cancel`, ask a run (or a combination's
//   members) to stop, from any thread; `stop`, what the driving thread does with a cancelled
//   run at its next check (`Next.stop`, then `release(stopping:)`); `skip`, what a stopped run
//   does with each stage still ahead (an `ensure` step runs all the same); `end`, a run's last
//   transition, with an outcome or cancelled (its completion hears of it once).
// - hold: what a cancelled run's end waits for: the thread that drives it, until it stops it; the
//   canceller, until its handlers have returned; a handler added late, until it returns
//   (`Run.callLate`; one added once the end is under way takes no hold: `callLateHandlers` calls it
//   before the next `ensure` step); and each combination or timeout the run runs (`Run.hold()`),
//   until what it counts has stopped: a combination's member runs, its launch loop and the threads
//   that call its members' cancel handlers (`Join`, which a stopping combination's verdict waits
//   for too); a timeout's work's run; the skip of a chain's first stage that the run reached
//   cancelled (`Run.skipReached`), until it is done; and a cancel on the thread where the work
//   that ignores cancel the run reached waits to start (`Run.startApart`), until it has started.
// - completion: what gets a run's outcome, such as a terminal's closure (`Engine.Completion`).
// - reporter: what a resolver reports to: a run, or a join for a member it calls directly.
// - join: one run of a combination, which runs its members and asks its policy as each ends.
// - member: one of the promises a combination runs.
// - share: the one run of a shared promise's work, that many runs wait for.
// - tie: what a step tied to a token checks before it calls its closure, that the token was not
//   invalidated since the user's run was made, as its terminal was called (`Run.isValid`).
// - user's run: the run a terminal started, whose count of invalidations before it every run
//   Future starts inside it copies for its ties (`Fields.invalidationsBefore`): a member's, a
//   timeout's work's, a shared or ignoring-cancel promise's work's.

// The unsafe and unusual constructs (what `../shared/tools/unsafe` lists), each kind argued once:
// - `@unchecked Sendable`: a promise's `Body`, as the stages of its chain are immutable once
//   built (their `var`s are written only by their deinits), so the stage classes need none of
//   their own; a run, a join, a shared promise, the deadlines and a timeline guard what changes
//   with their lock, a timeout with its work's run's; `RunHandle` holds a run, Sendable by its
//   lock. No user closure is kept in one without being `@Sendable`.
// - `@exclusivity(unchecked)`: one group an object, of fields its lock guards (or a deinit alone
//   writes): the lock orders every access, so the checks would only cost. (`Stage.parent` and
//   `Entry.next` are `@usableFromInline`, for the inlinable inits that set them, so Swift keeps
//   their checks: measured, a built chain's run then takes 1.7× the instructions, a promise
//   step 1.13×.)
// - `Unmanaged` and `borrowed(_:)`: the plan walks a chain's stages without reference counting;
//   the run keeps the chains (`Plan.root`, the spill's `chains`) while their stages are on it.
//   A thread's `Nesting` is kept, retained, as the raw pointer that thread-specific storage holds.
// - `unsafeDowncast`: a step reads its own stage, whose class made the step (`Stage.downcast`);
//   `Run.make` takes as a run the buffer that `Run.create` made.
// - `unsafeBitCast`: an operation's closure with its types erased (`Operation`), and the main
//   actor's isolation assumed on the main queue (MainActor.swift).
// - Raw memory: the slot (a step's output, typed by the step; debug builds check the type; a
//   join's, on the stack: `Slot.value`), the plan's stack, the run's tail (`ManagedBuffer`), a
//   lock's mutex, which must not move.
// - `nonisolated(unsafe)`: a value moved out of a slot has no other owner, nor the outcome a
//   join makes of its members' outcomes, which it lets go of; the count of invalidations is
//   guarded by its lock.
// - `UnsafeContinuation`: an awaiting task's, resumed once, by the run's end.
// - `isKnownUniquelyReferenced`, in a stage's deinit: how far to release a chain link by link,
//   rather than recursively; it decides when memory goes, never an outcome.

import Dispatch

/// The engine's namespace: the types behind the API, which its files declare in extensions.
@usableFromInline nonisolated enum Engine {}

nonisolated extension Unmanaged {
    /// Calls `body` with the object, neither retained nor released: the one way the engine reads
    /// an unretained reference. Sound because each object so read is kept until `body` returns
    /// by a strong reference that only the calling thread lets go of, and not while `body` runs:
    /// a stage on a run's plan by its chain (a chain keeps its stages by `parent`), which the
    /// plan keeps (`Plan.root`, the `Spill`'s chains; as it pushes the chain, its caller) and
    /// only the driving thread changes, between steps; a thread's `Nesting` by the thread itself,
    /// until it ends.
    func borrowed<T>(_ body: (Instance) -> T) -> T { _withUnsafeGuaranteedRef(body) }
}

nonisolated extension Engine {
    /// One step of a chain; `Node` adds what it keeps (usually your closure), which is `Sendable`.
    @usableFromInline class Stage {
        /// Runs the step: it takes its input from the slot and leaves its output there.
        @usableFromInline typealias Step = @Sendable (Stage, Slot, Run) -> Next

        /// Set as the stage is made, and written again only by a deinit, once nothing else refers
        /// to the stage: no access can overlap a write, so it skips exclusivity checks, which
        /// would cost one at every stage a plan pushes.
        @exclusivity(unchecked) @usableFromInline var parent: Stage?
        @usableFromInline let step: Step
        @usableFromInline let depth: Int
        @usableFromInline let slotSize: Int
        @usableFromInline let slotAlignment: Int
        @usableFromInline let isEnsure: Bool
        /// The type of the step's outcome, to destroy one that is left behind when a run stops.
        @usableFromInline let output: any SlotType.Type
        /// Starts, inside a run, the work of the `ignoringCancel()` promise this step is the
        /// first of, in a run of its own that cancelling does not reach.
        var ignoring: (@Sendable (Run) -> Void)? { nil }

        /// The chain a stopped run's walk goes on into from this step (see `Run.skip`): a
        /// `timeout`'s work, which the run has not started when it stops before the timeout.
        var ahead: Stage? { nil }

        /// The chains of a combination's members that start with `ignoringCancel()` work (see
        /// `ignoredWork`), for the combination's first stage: a run that stops before it, or a
        /// combination that never starts it, starts their work.
        var ignoringMembers: [Stage] { [] }

        /// This stage as the class it is, for the step that class made: unchecked (see above).
        @inlinable final func downcast<Kind: Stage>(to _: Kind.Type) -> Kind {
            unsafeDowncast(self, to: Kind.self)
        }

        /// The first stage of the chain that ends with this one, inside a `timeout` too, whose
        /// first stage holds the work's chain.
        var first: Stage {
            var first = self
            while let next = first.parent ?? first.ahead { first = next }
            return first
        }

        /// Whether the chain starts with `ignoringCancel()` work: its own, or its members' if it
        /// starts with a combination (which keeps only those members: so no walk into them).
        @usableFromInline var startsIgnoring: Bool {
            first.ignoring != nil || !first.ignoringMembers.isEmpty
        }

        /// The work of the `ignoringCancel()` promises the chain starts with: its own, or, for a
        /// chain that starts with a combination, its members', at any depth (a list, not
        /// recursion, for combinations nested deep).
        @usableFromInline var ignoredWork: [@Sendable (Run) -> Void] {
            var work: [@Sendable (Run) -> Void] = []
            var chains = [self]
            while let first = chains.popLast()?.first {
                if let ignoring = first.ignoring { work.append(ignoring) }
                chains.append(contentsOf: first.ignoringMembers.reversed())
            }
            return work
        }

        @inlinable init<Output>(
            after parent: Stage?, output: Output.Type, isEnsure: Bool = false, step: @escaping Step
        ) {
            self.parent = parent
            self.step = step
            self.isEnsure = isEnsure
            self.output = TypeOf<Output>.self
            depth = (parent?.depth ?? 0) + 1
            slotSize = max(parent?.slotSize ?? 1, MemoryLayout<Output>.size)
            slotAlignment = max(parent?.slotAlignment ?? 1, MemoryLayout<Output>.alignment)
        }

        // Releasing a chain one link at a time, rather than each link releasing the one before it
        // from its own deinit, keeps dropping a 100,000-link chain off the stack.
        deinit {
            guard var stage = parent.take() else { return }
            while isKnownUniquelyReferenced(&stage), let before = stage.parent.take() {
                stage = before
            }
        }
    }

    @usableFromInline final class Node<Payload: Sendable>: Stage {
        @usableFromInline let payload: Payload

        @inlinable init<Output>(
            _ payload: Payload, after parent: Stage?, output: Output.Type, isEnsure: Bool = false,
            _ step: @escaping Step
        ) {
            self.payload = payload
            super.init(after: parent, output: output, isEnsure: isEnsure, step: step)
        }

        @inlinable static func payload(of stage: Stage) -> Payload {
            stage.downcast(to: Node.self).payload
        }
    }

    /// A step that enters the promise its closure makes, or calls it in place if it is an
    /// operation alone (`Run.callOrEnter`; `flatMap`, `then`, `recover`). The
    /// closure may keep the promise before it, whose closure keeps the one before, as in a
    /// fallback list built in a loop: so it is released as a level of releases (see `Nesting`),
    /// and kept as it came (a `Node` keeps a closure behind a reabstraction thunk: one more
    /// allocation, and one more object for each level to release).
    @usableFromInline final class Entry<Input, Value, Failure: Swift.Error>: Stage {
        @usableFromInline typealias Next = @Sendable (Input) -> Promise<Value, Failure>
        /// A `var` only for `deinit`, the one write, once nothing else refers to the stage: so
        /// it skips exclusivity checks, which cost 13 % of a promise step.
        @exclusivity(unchecked) @usableFromInline var next: Next?

        @inlinable init(_ next: @escaping Next, after parent: Stage?, _ step: @escaping Step) {
            self.next = next
            super.init(after: parent, output: Swift.Result<Value, Failure>.self, step: step)
        }

        @inlinable static func next(of stage: Stage) -> Next {
            stage.downcast(to: Entry.self).next!
        }

        deinit { Nesting.release({ next as Any }, by: { next = nil }) }
    }

    /// What a promise keeps of its work: an operation alone, or the last stage of a chain, which
    /// is immutable (see the unsafe constructs above).
    @usableFromInline enum Body: @unchecked Sendable {
        case operation(Operation)
        case chain(last: Stage)
    }

    /// The closure a promise is made from, and in debug builds where it was made, for the report
    /// of a resolver let go of unresolved. Its types are erased, and given back by the promise
    /// that keeps it: so that a promise's layout does not depend on them (Swift 6.3 crashes
    /// compiling a promise of a parameter pack's element whose layout does).
    @usableFromInline struct Operation: Sendable {
        /// The closure, the same bits as the `Closure<Resolver<Value, Failure>>` its promise made,
        /// under a type that does not name the types.
        @usableFromInline let closure: Closure<AnyObject>
        #if DEBUG
            @usableFromInline let origin: (file: StaticString, line: UInt)
        #endif

        /// A closure of a class reference, which Swift passes the same way (borrowed) whatever the
        /// class: so a closure of a resolver serves as one of `AnyObject`. A struct, as Swift
        /// bit-casts a struct as it is, where it passes a closure through thunks that allocate.
        @usableFromInline struct Closure<Argument: AnyObject>: Sendable {
            @usableFromInline let body: @Sendable (Argument) -> Void
            @inlinable init(_ body: @escaping @Sendable (Argument) -> Void) { self.body = body }
        }

        @inlinable init<Value, Failure: Swift.Error>(
            file: StaticString, line: UInt,
            _ body: @escaping @Sendable (Resolver<Value, Failure>) -> Void
        ) {
            closure = unsafeBitCast(Closure(body), to: Closure<AnyObject>.self)
            #if DEBUG
                origin = (file, line)
            #endif
        }

        /// Calls the operation, which its promise made for resolvers of this type.
        @inlinable func callAsFunction<Value, Failure>(_ resolver: Resolver<Value, Failure>) {
            closure.body(resolver)
        }
    }

    /// The first stage of a chain made from an operation, once a step is added to it (a promise
    /// of an operation alone keeps the `Operation` itself, which costs no allocation), and the
    /// whole chain of a combination (`Engine.join`) or a `timeout`, made from its own operation.
    @usableFromInline final class Source<Value, Failure: Swift.Error>: Stage {
        /// The operation, the chain of a `timeout`'s work, which its operation runs (see
        /// `ahead`), an `ignoringCancel()` promise's work alone (see `ignoring`), and the chains
        /// of a combination's members that start with such work (see `ignoringMembers`): a `var`
        /// only for `deinit`, which releases it as a level of releases (see `Nesting`); one, as
        /// every access to it costs an exclusivity check.
        @usableFromInline var kept:
            (
                operation: Operation, work: Stage?, ignored: (@Sendable (Run) -> Void)?,
                ignoringMembers: [Stage]
            )?

        @inlinable init(
            _ operation: Operation, ignoring ignored: (@Sendable (Run) -> Void)? = nil,
            work: Stage? = nil, ignoringMembers: [Stage] = []
        ) {
            kept = (operation, work, ignored, ignoringMembers)
            super.init(after: nil, output: Swift.Result<Value, Failure>.self) {
                stage, _, run in
                let source = stage.downcast(to: Source.self)
                return run.perform(source.kept!.operation, Value.self, Failure.self, source: stage)
            }
        }

        override var ignoring: (@Sendable (Run) -> Void)? { kept?.ignored }

        override var ignoringMembers: [Stage] { kept?.ignoringMembers ?? [] }

        override var ahead: Stage? { kept?.work }

        // An operation may keep promises (a combination its members, a shared promise its work),
        // whose operations keep more: each is released as a level of releases, in this body (Swift
        // releases stored properties after every deinit has returned).
        deinit { Nesting.release({ kept as Any }, by: { kept = nil }) }
    }

    /// A type whose values a slot can hold; `TypeOf<T>` stands for `T`.
    @usableFromInline protocol SlotType { static func discard(from slot: Slot) }

    @usableFromInline enum TypeOf<Output>: SlotType {
        @usableFromInline static func discard(from slot: Slot) { _ = slot.take(Output.self) }
    }

    /// What the loop does after a step: go on (the output is in the slot), run a chain whose
    /// outcome is the output, stop (the run was cancelled), or go on on a queue (after a time),
    /// the output waiting in the slot; `leaving`: a hop off a queue the run must not stay on (an
    /// `ensure(on:)`'s), which a cancelled run still takes, to stop there. After a step called an
    /// operation, the loop learns whether to go on (it resolved), stop, or `wait` for its resolver.
    @usableFromInline enum Next {
        case proceed
        case enter(Stage)
        case called, wait
        case stop
        case hop(DispatchQueue, DispatchTime?, leaving: Bool = false)
    }

    /// Where a step finds its input and leaves its output: raw memory sized for the largest outcome
    /// in the chain, so passing a value along costs no allocation and no cast. In debug builds it
    /// checks the type it holds, so that a `take` of another type than the `put` traps rather
    /// than reading memory as what it is not; a release build pays nothing.
    @usableFromInline struct Slot {
        @usableFromInline let memory: UnsafeMutableRawPointer
        /// The type the slot holds: its owner's (a run's), which outlives this copy of the slot.
        @usableFromInline var holds: SlotHolds = SlotHolds()

        @inlinable init(memory: UnsafeMutableRawPointer) { self.memory = memory }

        /// Lends `write` a temporary slot (on the stack, if it fits), for a resolver that reports
        /// to a join rather than to a run, and returns the `Value` that `write` put there. Sound:
        /// the memory is sized and aligned for a `Value` (a stride is never zero), `write` (a
        /// resolver's) puts one, and `take` moves it out before the memory goes; a debug build
        /// checks its type at `take`.
        @inlinable static func value<Value>(_: Value.Type, from write: (Slot) -> Void) -> Value {
            withUnsafeTemporaryAllocation(
                byteCount: MemoryLayout<Value>.stride, alignment: MemoryLayout<Value>.alignment
            ) {
                let slot = Slot(memory: $0.baseAddress!)
                write(slot)
                return slot.take()
            }
        }

        @inlinable func put<Output>(_ output: Output) {
            assert(Int(bitPattern: memory) % MemoryLayout<Output>.alignment == 0, "misaligned slot")
            #if DEBUG
                precondition(holds.type == nil, "put of \(Output.self) in a slot of \(holds.type!)")
                holds.type = Output.self
            #endif
            memory.initializeMemory(as: Output.self, to: output)
        }

        /// Moves the value out; `sending`, as what a slot holds has no other owner (an operation's
        /// outcome comes `sending`, a constant is `Sendable`, a step's output is its own).
        @inlinable func take<Input>(_: Input.Type = Input.self) -> sending Input {
            #if DEBUG
                let held = { holds.type.map { "a slot of \($0)" } ?? "an empty slot" }
                precondition(holds.type == Input.self, "take of \(Input.self) from \(held())")
                holds.type = nil
            #endif
            nonisolated(unsafe) let input = memory.assumingMemoryBound(to: Input.self).move()
            return input
        }
    }

    #if DEBUG
        /// The type of what a slot holds, if it holds anything, which debug builds check.
        @usableFromInline final class SlotHolds {
            @usableFromInline var type: Any.Type?
            @usableFromInline init() {}
        }
    #else
        /// Nothing, in a release build, which checks no slot.
        @usableFromInline typealias SlotHolds = Void
    #endif

    /// The steps a run has still to take, the next on top: in the run's tail, or once the chains
    /// that steps enter need more room, in its `Spill`. A run that ends by entering a chain leaves
    /// nothing of it behind, so that a loop that recurses through `then` runs in constant memory.
    @usableFromInline struct Plan {
        /// Unretained, so that walking a chain costs no reference counting: the run's own chain
        /// is kept by `root`, the chains entered since by the run's `Spill`. An address and two
        /// 32-bit counts, not a `Room` and a count: a run is a word smaller.
        private var stages: UnsafeMutablePointer<Unmanaged<Stage>>?
        private var count: Int32 = 0
        private var capacity: Int32 = 0
        private var root: Stage?

        /// Loads the stages of the run's own chain, as the run starts, in `room`, its tail, which
        /// `Run.make` sized for them.
        mutating func load(_ chain: consuming Stage, in room: Room) {
            stages = room.baseAddress
            capacity = Int32(room.count)
            push(chain)
            root = consume chain
        }

        /// Pushes the stages of a chain a step returned, which `spill` keeps until they have run
        /// (in `spill`'s memory, if they need more room).
        mutating func enter(_ chain: consuming Stage, spill: inout Spill?) {
            let kept = Spill.make(&spill)
            // Chains whose stages have all run are released here, not as their last step runs.
            while let entered = kept.owned.chains.last, entered.base >= count {
                kept.owned.chains.removeLast()
            }
            if count + Int32(chain.depth) > capacity { grow(by: chain.depth, into: kept) }
            let base = count
            push(chain)
            kept.owned.chains.append((consume chain, base))
        }

        /// Takes the chains entered whose stages have all run out of `spill`, for the thread that
        /// ran them to let go of as the run leaves it (it waits for a resolver or a queue), so
        /// that a step's captures go away where the run was. (`enter` lets go of them in place,
        /// with no array to allocate: the run is still the thread's.)
        func takeFinished(from spill: Spill?) -> [Stage] {
            var finished: [Stage] = []
            while let entered = spill?.owned.chains.last, entered.base >= count {
                finished.append(spill!.owned.chains.removeLast().last)
            }
            return finished
        }

        /// Pushes a chain's stages, for which there is room: its last at the bottom, its first on
        /// top. Each parent is read through the unretained reference below it, which skips a
        /// retain and a release.
        private mutating func push(_ last: Stage) {
            let depth = Int32(last.depth)
            assert(count + depth <= capacity, "no room on the plan")
            let stages = stages!
            stages[Int(count)] = .passUnretained(last)
            for index in Int(count) + 1..<Int(count + depth) {
                stages[index] = stages[index - 1].borrowed { .passUnretained($0.parent!) }
            }
            count += depth
        }

        /// Moves the stack to `kept`'s memory, with room for `depth` more stages.
        private mutating func grow(by depth: Int, into kept: Spill) {
            let room = Room.allocate(capacity: max(Int(count) + depth, 2 * Int(capacity)))
            room.baseAddress!.moveInitialize(from: stages!, count: Int(count))
            kept.owned.stages?.deallocate()
            kept.owned.stages = room
            stages = room.baseAddress
            capacity = Int32(room.count)
        }

        /// The next stage, left on the plan.
        var top: Stage? { count > 0 ? stages![Int(count) - 1].takeUnretainedValue() : nil }

        mutating func pop() -> Unmanaged<Stage>? {
            guard count > 0 else { return nil }
            count -= 1
            return stages![Int(count)]
        }

        /// Puts back the stage just popped, still in its place, for a run that hops.
        mutating func putBack() { count += 1 }
    }

    /// Memory for a plan's stages.
    typealias Room = UnsafeMutableBufferPointer<Unmanaged<Stage>>

    /// What a run needs beyond its tail: the chains its steps entered, which it keeps until their
    /// stages have run, and, once its tail is too small, the memory of its stack or its slot.
    final class Spill {
        /// The driving thread's, as the `Driver` that keeps the spill is, handed on with it under
        /// the run's lock: no two threads reach it at once, so it skips exclusivity checks (they
        /// would cost more than the work).
        @exclusivity(unchecked) var owned = Owned()

        struct Owned {
            var chains: [(last: Stage, base: Int32)] = []
            /// The deadline of the queue the run waits for, if it has one.
            var hopDeadline: Deadline?
            fileprivate(set) var stages: Room?
            fileprivate(set) var slot: (memory: UnsafeMutableRawPointer, size: Int, alignment: Int)?
        }

        static func make(_ spill: inout Spill?) -> Spill {
            if let spill { return spill }
            let made = Spill()
            spill = made
            return made
        }

        /// Memory for a slot of `size` bytes, aligned to `alignment` (the slot is empty).
        func growSlot(size: Int, alignment: Int) {
            owned.slot.map { $0.memory.deallocate() }
            owned.slot = (.allocate(byteCount: size, alignment: alignment), size, alignment)
        }

        deinit {
            owned.stages?.deallocate()
            owned.slot.map { $0.memory.deallocate() }
        }
    }
}

nonisolated extension Promise {
    /// Adds a step that sees the whole outcome and returns the next one at once.
    @inlinable func mapOutcome<NewValue, NewFailure>(
        _ transform: @escaping @Sendable (Outcome) -> Swift.Result<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        typealias Transform = @Sendable (Outcome) -> Swift.Result<NewValue, NewFailure>
        return appending(transform) { stage, slot, _ in
            slot.put(Node<Transform>.payload(of: stage)(slot.take(Outcome.self)))
            return .proceed
        }
    }

    /// Adds a step that keeps `payload` and runs `step` with it.
    @inlinable func appending<Payload: Sendable, NewValue, NewFailure>(
        _ payload: Payload, isEnsure: Bool = false, _ step: @escaping Engine.Stage.Step
    ) -> Promise<NewValue, NewFailure> {
        typealias Output = Swift.Result<NewValue, NewFailure>
        return Promise<NewValue, NewFailure>(
            last: Node(payload, after: last, output: Output.self, isEnsure: isEnsure, step))
    }

    /// Adds a step that enters the promise `next` makes, as `step` decides (`Entry`).
    @inlinable func entering<Input, V, F>(
        _ next: @escaping Engine.Entry<Input, V, F>.Next, _ step: @escaping Engine.Stage.Step
    ) -> Promise<V, F> { Promise<V, F>(last: Engine.Entry(next, after: last, step)) }

    /// How a step's errors join the chain, decided once, as the step is built, so that a run pays
    /// no test: `nil` when they are the chain's own; else a conversion, for a step that cannot fail
    /// or a chain that fails with `any Error`. Any other pair stops here, where the mistake is,
    /// rather than at the first failure of some run; `fatalError`, as a `precondition` loses its
    /// message in a release build. (A chain that cannot fail reaches here only from generic code:
    /// elsewhere Swift picks the shapes that take the step's error type.)
    @inlinable static func errorConversion<StepFailure>(
        from _: StepFailure.Type
    ) -> (@Sendable (StepFailure) -> Failure)? {
        if StepFailure.self == Failure.self { return nil }
        guard StepFailure.self == Never.self || Failure.self == (any Swift.Error).self else {
            fatalError(
                """
                then: a step that fails with \(StepFailure.self) cannot join a chain that fails \
                with \(Failure.self). Convert the step's error with mapError(_:), as in \
                `.then { step($0).mapError { _ in MyError.failed } }`, or call eraseToAnyError() \
                on the chain. (In generic code, a chain that cannot fail takes the step's error \
                type with setFailureType(to:) first.)
                """)
        }
        return { $0 as! Failure }  // a `Never` never comes; an error is an `any Error`
    }
}
