// Package kube is enid's optional link to the Kubernetes API server, and the
// only package that uses client-go. It sits beside the loop, never in it:
//
//   - node facts: this node's labels, from a watch on its Node object, feed
//     the config overrides that match on labels;
//   - events: the attachment statuses the agent publishes become Warning
//     and Normal events on the pods, aggregated and rate-limited;
//   - capacity: the pool's capacity is published as extended resources in
//     the node's status, with a condition summarising the agent's health.
//
// Desired state stays files on the node: with no API server configured, or
// with it unreachable, the agent serves pods as before. Nothing here blocks
// its caller: reports are queued (bounded, newest wins) and written by one
// goroutine that Run owns; every API call has a timeout.
package kube
