// expect: error: 'then(on:_:)' is unavailable: Future has no then(on:): hop first with .on(queue), as in .on(.main).then { … }, or for main-actor work use map(on: .main) or done(on: .main)
// PromiseKit's most common habit: Future chooses a queue with a hop, or a main-actor step.
import Future

struct User: Sendable { var name: String }

func fetchUser() -> Guarantee<User> { Guarantee(value: User(name: "a")) }

let name = fetchUser().then(on: .main) { user in user.name }
