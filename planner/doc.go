// Package planner computes what enid must do: Make(desired.State,
// observed.State, Options) returns a Plan, an ordered list of actions with
// reasons and dependencies, plus the next version of the planner's Memory.
//
// It is the third step of desired -> observed -> plan -> execute and is
// pure: no I/O, no clock (time comes in Options), no goroutines, and the
// same inputs always give the same plan.
//
// # Where to look
//
// Questions a reader brings, and the file that answers each (the test
// scripts in testdata/ tell the same stories with inputs and plans):
//
//   - What is a plan, an action, a reason? plan.go; rendered in render.go,
//     checked in validate.go.
//   - In which order does a pass plan? make.go (Make, newBuilder), then
//     pool.go (shared: the steps of a pass).
//   - How is an address chosen for a pod? bind.go: existing bindings from
//     the kernel, the published statuses and sticky reservations, then
//     free addresses in fill order (testdata/restore.txt,
//     testdata/sticky.txt).
//   - When does the pool grow, and by how much? pool.go (setPool: the
//     policy), grow.go (attached ENIs, adoption, new ENIs, the vSwitch and
//     the instance's limits), prefix.go (/28 prefixes).
//   - When are addresses or ENIs given back? release.go (releaseDelay,
//     maxIdle, whole prefixes, leaked ENIs).
//   - How is DEL handled? node.go (teardown and unpublish of attachments
//     with no entry) with make.go's kept (deletion records, the runtime's
//     records); testdata/del.txt.
//   - What about an entry whose pod is gone? stale.go
//     (testdata/stale_entries.txt).
//   - Which pods count as demand before their entry arrives? admitted.go
//     (the kubelet's files; testdata/admitted_deleted.txt).
//   - How do security groups per pod work? sgset.go (one pool per set,
//     moves in place, slots between sets).
//   - What happens when ECS throttles? Growth that waiting pods need is
//     Urgent (pool.go markUrgent) and the pod path's node actions too
//     (node.go urgentPodPath); the rest is optional and the executor defers
//     it. A throttled action backs off briefly (backoff.go). After a change of the pool's knobs, optional work waits for the
//     node's turn (spread.go). The client's limiter is in package cloud.
//   - What does the planner remember between passes, and when does time
//     alone change the plan? memory.go, wake.go (NextDeadline).
//   - What does a failed action teach later plans (a vSwitch out of
//     addresses or of /28s, refused security groups, a burnt token)?
//     outcome.go: the executor reports each action's facts as an Outcome
//     (its FailureClass among them), Memory.Learn decides
//     (testdata/failure_exhausted.txt, testdata/failure_fragmented.txt,
//     testdata/failure_token.txt, testdata/failure_groups.txt).
//   - When is a failed action tried again, and what does a pod whose setup
//     failed hear meanwhile? backoff.go: one back-off policy per RetryKey
//     in Memory.Backoffs, shown as Action.NotBefore, woken for by
//     NextDeadline; the pod's setup-failed, interface-conflict or
//     netns-refused status (testdata/failure_setup.txt). The executor
//     only holds an action until its NotBefore.
//   - What does an action do to the world? effect.go (one function per
//     kind, shared by the agent's cache, the test world and the
//     no-datapath mode; Before, Apply, and Failed for a failed one).
//   - How are existing addresses indexed? index.go.
package planner
