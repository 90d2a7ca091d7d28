// Package planner computes what enid must do: Plan(desired.State,
// observed.State, Options) returns a Plan, an ordered list of actions with
// reasons and dependencies, plus the next version of the planner's Memory.
//
// It is the third step of desired -> observed -> plan -> execute and is
// pure: no I/O, no clock (time comes in Options), no goroutines, and the
// same inputs always give the same plan.
package planner
