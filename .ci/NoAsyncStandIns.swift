// Darwin's Dispatch marks these waits `noasync`: calling one from asynchronous code, top-level
// code with an `await` in it included, is an error in Swift 6 mode there. Linux's Dispatch does
// not mark them, so CI compiles the playground's pages and the README's and the documentation's
// examples beside these stand-ins, which carry the mark and shadow Dispatch's methods in the
// module that declares them. Darwin marks the timed waits too, but a stand-in for one could not
// call the method it shadows; no example uses them.

import Dispatch

extension DispatchSemaphore {
    @available(*, noasync, message: "Darwin's Dispatch marks it so: await instead")
    func wait() { _ = wait(timeout: .distantFuture) }
}

extension DispatchGroup {
    @available(*, noasync, message: "Darwin's Dispatch marks it so: await instead")
    func wait() { _ = wait(timeout: .distantFuture) }
}
