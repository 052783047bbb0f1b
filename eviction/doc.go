// Package eviction is nodeshim's pressure policy: what the node's cgroup
// facts (package cgroup) mean for the node, as conditions of package
// condition.
//
// It names kubelet's eviction signals and maps the node's available
// amounts to them (signals.go), parses thresholds in kubelet's
// --eviction-hard syntax with its defaults (threshold.go), and sets
// MemoryPressure, DiskPressure and PIDPressure with kubelet's polarity as
// soon as a threshold is crossed, clearing them only after a transition
// period (conditions.go). PSI views turn the node's memory and IO stall
// into MemoryContentionFree and IOContentionFree with a severity
// (psiview.go). Time comes from each snapshot, never from a clock of its
// own, so that transition periods are tested without sleeping.
//
// A Monitor runs a cgroup.Monitor and evaluates every snapshot it reads,
// emitting the transitions (monitor_linux.go). Nothing here reads a file
// itself, speaks HTTP or holds a Kubernetes client.
package eviction
