// Package ecssim is a local simulator of the ECS (2014-05-26) and VPC
// (2016-04-28) RPC APIs and the instance metadata service, faithful enough
// that the unmodified alibaba-cloud-sdk-go talks to it over HTTP. Tests,
// the demo and the benchmarks stand it in for the cloud that cloud observes
// (observe step) and changes (execute step).
package ecssim
