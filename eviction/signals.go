package eviction

import "github.com/nodeshim/nodeshim/cgroup"

// Signal names an eviction signal, spelled as kubelet spells it.
type Signal string

// The signals nodeshim computes. Their definitions follow kubelet's
// (pkg/kubelet/eviction/helpers.go, makeSignalObservations); package
// cgroup computes their amounts.
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// Signals lists every signal in a fixed order.
var Signals = [...]Signal{
	SignalMemoryAvailable, SignalAllocatableMemoryAvailable,
	SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree,
	SignalPIDAvailable,
}

// Observations maps each signal to its observation.
type Observations map[Signal]cgroup.Observation

// Observe names each of the node's available amounts by its signal.
func Observe(a cgroup.Available) Observations {
	return Observations{
		SignalMemoryAvailable:            a.Memory,
		SignalAllocatableMemoryAvailable: a.AllocatableMemory,
		SignalNodeFsAvailable:            a.NodeFs,
		SignalNodeFsInodesFree:           a.NodeFsInodes,
		SignalImageFsAvailable:           a.ImageFs,
		SignalImageFsInodesFree:          a.ImageFsInodes,
		SignalPIDAvailable:               a.PIDs,
	}
}
