// Package reconcile is the agent's loop, the last step of
// desired -> observed -> plan -> execute: wake-ups only trigger a pass; a
// pass loads desired state, takes observed state from a cache, plans,
// executes the plan's actions against cloud and linux, and publishes a
// status per attachment.
package reconcile
