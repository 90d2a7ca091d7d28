// Package simulation runs the real agent, many nodes of it, on virtual
// time, so that a run is a pure function of its seed: the same seed gives
// the same trace, byte for byte (Result.Hash), on any machine, however
// loaded.
//
// Each node is an ECS instance of the simulated cloud (cloud/ecssim) with
// a real reconcile.Agent: the production loop, planner, executor, memory,
// cloud client (the real Alibaba Cloud SDK, encoding, signing and
// decoding every call) and desired-state files (config, pod entries,
// deletion records, statuses, memory, in a directory of its own). What
// differs from a node:
//
//   - Time is one clock.Virtual, shared by every agent (each through an
//     Owned view that tags its waiters) and by the simulator (its
//     latency and transition delays, ecssim.Config.Timers).
//   - The SDK's HTTP goes through an in-process transport to the
//     simulator's handler: no socket. A call parks until the run releases
//     it; calls parked at one instant are released one at a time in the
//     order of their node and content, so the scheduler never decides
//     the order in which the cloud sees them (nor, so, its answers and
//     random draws).
//   - The datapath is reconcile.NoDatapath (the kernel's record), one per
//     node, outliving agent restarts as a kernel does.
//   - The container runtime and the CNI plugin are the run's own events
//     (pod.go): ADD writes the entry and waits for a status answering its
//     revision; DEL records the deletion and removes the entry; CNI GC
//     removes entries the runtime no longer lists.
//
// # How a run moves
//
// Run must be called inside a testing/synctest bubble. Its loop (world.loop)
// waits until every goroutine of the run is durably blocked
// (synctest.Wait), checks the nodes whose goroutines ran, then makes the
// next single event happen: a parked cloud call if any, else the earliest
// of the clock's waiters (clock.Virtual.StepOwner fires exactly one) and
// the harness's own events (workload, faults). Waiters due at the same
// time fire in the order of their owner's rank (the node's index), then of
// their arming; nothing else can reorder a run.
//
// # What it checks
//
// After every event, on the nodes that ran: no address is set up for two
// pods, on any node (the datapath's record, fleet-wide); no mutation
// reaches a primary or foreign ENI (checked on the request); every ADD is
// answered Ready or Failed with a reason within the plugin's timeout
// when the cloud was healthy and the agent not killed during the wait.
// After the workload, every pod is deleted and the fleet settles; then
// every pod must be torn down, no address set up, every owned ENI InUse
// on its owner, the idle addresses within pool.maxIdle (plus a prefix's
// 15), and planning a sample of nodes once more (reconcile.PlanOnce, as
// `enid plan`) must find nothing to do.
//
// # Faults and odd orderings (Config.Faults)
//
// Drawn from the seed: agent kills at any event boundary (the files copied
// as they are at that instant; a call in flight has reached the cloud or
// not, and the killed incarnation is fenced from the cloud and the
// datapath from then on), config changes (pool knobs, a switch to or from
// /28 prefixes), CNI GC, DEL within 50 ms of the ADD, repeated ADDs and
// DELs, sandboxes the runtime forgets without a DEL, bursts of ten pods,
// cloud outages (every call 5xx), throttling storms (the account at 2
// calls/s), stale describes and OperationConflict (per seed), burnt
// ClientTokens, foreign ENIs on a third of the instances. Even seeds use
// the simulator's realistic profile (latency, 3 s attaches, conflicts),
// odd ones the fast one.
//
// # What it does not model
//
// A kill lands between two events: code that runs between two parkings
// of the agent's goroutines (a pass from its wake-up to its next wait, a
// file write and the next) is atomic here, though a real SIGKILL can land
// inside it; the e2e crash tests cover those points with a real process.
// There is no kernel (NoDatapath), no metadata service (the agent is
// given its instance), no Kubernetes API (no node watch, no hints), no
// file watcher (the harness tells the agent which entry files it changed,
// Agent.EntriesChanged, and wakes it whole after a config change), no
// disk errors, and one zone with one vSwitch big enough for every pod.
package simulation
