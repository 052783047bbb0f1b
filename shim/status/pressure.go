package status

import "time"

// Pressure is the node's eviction signals and PSI as the cgroup pressure
// monitor last read them.
type Pressure struct {
	// ObservedAt is when the values were read.
	ObservedAt time.Time `json:"observedAt"`
	// Signals are kubelet's eviction signals (memory.available, ...).
	Signals []Signal `json:"signals"`
	// PSI is the node's pressure stall information per resource.
	PSI []PSI `json:"psi"`
	// Watchers say how each pressure file is watched: a PSI trigger, or
	// polling where the kernel refuses triggers.
	Watchers []PressureWatcher `json:"watchers,omitempty"`
	// Pods are the pods' cgroup figures and PSI, most pressured first; the
	// API serves them on GET /pods and with GET /status?pods=true only.
	Pods *PodPressures `json:"pods,omitempty"`
}

// PodPressures are the per-pod figures of one read of the kubepods tree.
type PodPressures struct {
	ObservedAt time.Time `json:"observedAt"`
	// Kubepods is the kubepods cgroup read, Driver its naming (cgroupfs,
	// systemd).
	Kubepods string `json:"kubepods,omitempty"`
	Driver   string `json:"driver,omitempty"`
	// Unknown is why the pods could not be read (no kubepods cgroup yet).
	Unknown string        `json:"unknown,omitempty"`
	Items   []PodPressure `json:"items"`
}

// PodPressure is one pod's memory and PSI.
type PodPressure struct {
	UID string `json:"uid"`
	// Namespace and Name are the pod's, when the runtime knows the UID.
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name,omitempty"`
	QOS        string    `json:"qosClass"`
	Cgroup     string    `json:"cgroup"`
	Containers int       `json:"containers"`
	Memory     PodMemory `json:"memory"`
	// PSI is the pod's pressure per resource, from its cgroup v2
	// directory; Unknown says why where v2 has none for the pod.
	PSI []PSI `json:"psi"`
}

// PodMemory is a pod's memory use.
type PodMemory struct {
	// Source is where the figures come from: "cgroup v2", or "cgroup v1"
	// where the pod's memory cgroup is in a v1 hierarchy (hybrid nodes).
	Source          string `json:"source"`
	UsageBytes      uint64 `json:"usageBytes,omitempty"`
	WorkingSetBytes uint64 `json:"workingSetBytes,omitempty"`
	// LimitBytes is nil without a limit.
	LimitBytes *uint64 `json:"limitBytes,omitempty"`
	OOMKills   uint64  `json:"oomKills,omitempty"`
	Unknown    string  `json:"unknown,omitempty"`
}

// Signal is one eviction signal: available out of capacity, or why it is
// unknown.
type Signal struct {
	Name      string `json:"name"`
	Available uint64 `json:"available,omitempty"`
	Capacity  uint64 `json:"capacity,omitempty"`
	// Unknown is why the signal could not be read; the amounts are then
	// meaningless.
	Unknown string `json:"unknown,omitempty"`
	Source  string `json:"source,omitempty"`
}

// PSI is one resource's pressure: the share of time some (or all) tasks
// stalled, in percent, and the total stall time.
type PSI struct {
	Resource string   `json:"resource"`
	Some     PSILine  `json:"some"`
	Full     *PSILine `json:"full,omitempty"`
	// Unknown is why the resource's pressure could not be read.
	Unknown string `json:"unknown,omitempty"`
}

// PSILine is one line of a PSI file.
type PSILine struct {
	Avg10             float64 `json:"avg10"`
	Avg60             float64 `json:"avg60"`
	Avg300            float64 `json:"avg300"`
	TotalMicroseconds uint64  `json:"totalMicroseconds"`
}

// PressureWatcher says how one pressure file is watched.
type PressureWatcher struct {
	Path string `json:"path"`
	Mode string `json:"mode"`
	// Trigger is the PSI trigger armed in trigger mode.
	Trigger        string `json:"trigger,omitempty"`
	FallbackReason string `json:"fallbackReason,omitempty"`
}
