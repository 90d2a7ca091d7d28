// Package status holds the files the agent publishes: one status per pod
// attachment (/run/enid/status/<containerID>_<ifName>.json) and the agent
// heartbeat (/run/enid/agent.json). They are the output of the execute step
// of desired -> observed -> plan -> execute, read by the CNI plugin and by
// `enid status`.
package status
