// Package status holds the files the agent publishes: one status per pod
// attachment (/run/enid/status/<containerID>_<ifName>.json) and the agent
// heartbeat (/run/enid/agent.json). They are the output of the execute step
// of desired -> observed -> plan -> execute, read by the CNI plugin and by
// `enid status`.
//
// Both formats carry apiVersion Version and are written with
// WriteFileAtomic, so a reader sees a whole old file or a whole new one. A
// status names the entry revision it answers. The formats are documented in
// docs/status-files.md. The package uses the standard library only.
package status
