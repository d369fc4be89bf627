import Testing

@testable import Future

/// A slot, where a run's steps pass values along as raw memory, checks in debug builds the type
/// it holds: a mismatch traps, with a message that names both types, rather than reading memory
/// as what it is not. (A trap ends the process: the traps are checked in exit tests, each in a
/// process of its own.)
@Suite struct Slots {
    /// Calls `body` with a slot of 32 bytes, of its own memory.
    static func withSlot<T>(_ body: (Engine.Slot) -> T) -> T {
        let memory = UnsafeMutableRawPointer.allocate(byteCount: 32, alignment: 16)
        defer { memory.deallocate() }
        return body(Engine.Slot(memory: memory))
    }

    @Test func aTakeOfTheTypePutGivesTheValueBack() {
        let taken = Self.withSlot { slot in
            slot.put([1, 2, 3])
            let first = slot.take([Int].self)
            slot.put("next")  // empty again
            return (first, slot.take(String.self))
        }
        #expect(taken.0 == [1, 2, 3])
        #expect(taken.1 == "next")
    }

    // Exit tests need processes of their own: macOS and Linux have them.
    #if os(macOS) || os(Linux)
        #if DEBUG
            @Test func aTakeOfAnotherTypeThanThePutTraps() async {
                let result = await #expect(
                    processExitsWith: .failure, observing: [\.standardErrorContent]
                ) {
                    exitTestWatchdog(expectsSuccess: false)
                    Slots.withSlot { slot in
                        slot.put(1)
                        _ = slot.take(String.self)
                    }
                }
                let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
                #expect(message.contains("take of String from a slot of Int"))
            }

            @Test func aTakeOfAnEmptySlotTraps() async {
                let result = await #expect(
                    processExitsWith: .failure, observing: [\.standardErrorContent]
                ) {
                    exitTestWatchdog(expectsSuccess: false)
                    Slots.withSlot { _ = $0.take(Int.self) }
                }
                let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
                #expect(message.contains("take of Int from an empty slot"))
            }

            @Test func aPutIntoASlotThatHoldsAValueTraps() async {
                let result = await #expect(
                    processExitsWith: .failure, observing: [\.standardErrorContent]
                ) {
                    exitTestWatchdog(expectsSuccess: false)
                    Slots.withSlot { slot in
                        slot.put(1)
                        slot.put("over it")
                    }
                }
                let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
                #expect(message.contains("put of String in a slot of Int"))
            }
        #endif
    #endif
}
