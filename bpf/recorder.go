package bpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// maxSyscalls mirrors MAX_SYSCALLS in c/recorder.bpf.c; the last slot counts
// numbers outside the table (OtherSyscall).
const maxSyscalls = 1024

// OtherSyscall is the pseudo syscall number under which the recorder counts
// syscall numbers it cannot index, such as x32 numbers (bit 30 set).
const OtherSyscall = maxSyscalls - 1

// TargetKind says how the recorder recognises the tasks it records.
type TargetKind uint32

// The kinds of target, with the values of enum target_mode in
// c/recorder.bpf.c.
const (
	// TargetCgroup records every task in a cgroup v2 subtree, matched by
	// the id of its ancestor at the target's level
	// (bpf_get_current_ancestor_cgroup_id, 4.18+ for tracing programs).
	TargetCgroup TargetKind = 1
	// TargetMountNS records every task in the given mount namespaces: the
	// way to follow a container on a host whose cgroup v2 hierarchy carries
	// no container cgroups (hybrid cgroups).
	TargetMountNS TargetKind = 2
	// TargetProcessTree records the given processes and every process they
	// fork from the moment the recorder is attached.
	TargetProcessTree TargetKind = 3
)

// String names the kind as the CLI prints it.
func (k TargetKind) String() string {
	switch k {
	case TargetCgroup:
		return "cgroup"
	case TargetMountNS:
		return "mount-namespace"
	case TargetProcessTree:
		return "process-tree"
	}
	return fmt.Sprintf("TargetKind(%d)", uint32(k))
}

// Target is what a Recorder records. Build it with CgroupTarget,
// MountNSTarget or ProcessTreeTarget.
type Target struct {
	// Kind selects how tasks are matched.
	Kind TargetKind
	// Keys are cgroup v2 ids (TargetCgroup), mount namespace inode numbers
	// (TargetMountNS) or process ids (TargetProcessTree).
	Keys []uint64
	// CgroupLevel is the depth of the target cgroup below the cgroup v2
	// root (the root is 0); only for TargetCgroup.
	CgroupLevel int
	// FromFilterLoad counts a matched process only from the moment it
	// asks the kernel to install a seccomp filter (seccomp(2)
	// SECCOMP_SET_MODE_FILTER or prctl(2) PR_SET_SECCOMP with a program)
	// until it executes a new program, that execve included: what an OCI
	// runtime's container init does under the container's filter. Every
	// thread of the process counts from then on.
	FromFilterLoad bool
}

// CgroupTarget records the cgroup v2 subtree whose root has the given id
// (the inode number of its directory) at the given depth below the root.
func CgroupTarget(id uint64, level int) Target {
	return Target{Kind: TargetCgroup, Keys: []uint64{id}, CgroupLevel: level}
}

// MountNSTarget records the tasks in the mount namespaces with these inode
// numbers (the inode of /proc/PID/ns/mnt).
func MountNSTarget(inums ...uint64) Target {
	return Target{Kind: TargetMountNS, Keys: inums}
}

// ProcessTreeTarget records these processes and their descendants forked
// after the recorder is attached.
func ProcessTreeTarget(pids ...uint32) Target {
	keys := make([]uint64, len(pids))
	for i, p := range pids {
		keys[i] = uint64(p)
	}
	return Target{Kind: TargetProcessTree, Keys: keys}
}

// ErrNoTarget is returned by NewRecorder for a Target without keys or with
// an unknown kind.
var ErrNoTarget = errors.New("recorder target has no keys or an unknown kind")

// Recorder counts, per syscall number, the syscalls that its target makes.
// It is attached from NewRecorder until Close.
type Recorder struct {
	target Target
	// objs holds the maps and programs but not the .rodata variables:
	// an assigned *ebpf.Variable keeps the map memory-mapped, and with it
	// alive, until the garbage collector unmaps it.
	objs  recorderLoaded
	links []link.Link
}

type recorderLoaded struct {
	recorderMaps
	recorderPrograms
}

// Close releases the programs and maps.
func (o *recorderLoaded) Close() error {
	return errors.Join(o.recorderPrograms.Close(), o.recorderMaps.Close())
}

// NewRecorder loads the recorder programs for target and attaches them to
// raw_syscalls/sys_enter (and, for a process tree, to sched_process_fork
// and sched_process_exit). Close detaches and unloads everything.
func NewRecorder(target Target) (*Recorder, error) {
	return newRecorder(target, nil)
}

// newRecorder is NewRecorder with a shared kernel BTF cache (nil decodes
// the kernel BTF afresh).
func newRecorder(target Target, cache *btf.Cache) (*Recorder, error) {
	if len(target.Keys) == 0 || target.Kind < TargetCgroup || target.Kind > TargetProcessTree {
		return nil, fmt.Errorf("%w: kind %v, %d keys", ErrNoTarget, target.Kind, len(target.Keys))
	}
	spec, err := loadRecorder()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[recorderVarTargetMode].Set(uint32(target.Kind)); err != nil {
		return nil, fmt.Errorf("set recorder target_mode: %w", err)
	}
	if err := spec.Variables[recorderVarCgroupLevel].Set(int32(target.CgroupLevel)); err != nil {
		return nil, fmt.Errorf("set recorder cgroup_level: %w", err)
	}

	if target.FromFilterLoad {
		for name, v := range map[string]any{
			recorderVarFromFilterLoad: uint32(1),
			recorderVarNrSeccomp:      uint64(unix.SYS_SECCOMP),
			recorderVarNrPrctl:        uint64(unix.SYS_PRCTL),
		} {
			if err := spec.Variables[name].Set(v); err != nil {
				return nil, fmt.Errorf("set recorder %s: %w", name, err)
			}
		}
	}
	r := &Recorder{target: target}
	opts := &ebpf.CollectionOptions{Cache: cache}
	// Load only what this target runs: another program would be dead
	// weight in the kernel, and attached on another hot tracepoint.
	switch tree := target.Kind == TargetProcessTree; {
	case tree && target.FromFilterLoad:
		err = spec.LoadAndAssign(&r.objs, opts)
	case tree:
		var objs struct {
			recorderMaps
			RecordSysEnter *ebpf.Program `ebpf:"record_sys_enter"`
			RecordFork     *ebpf.Program `ebpf:"record_fork"`
			RecordExit     *ebpf.Program `ebpf:"record_exit"`
		}
		err = spec.LoadAndAssign(&objs, opts)
		r.objs.recorderMaps = objs.recorderMaps
		r.objs.RecordSysEnter, r.objs.RecordFork, r.objs.RecordExit = objs.RecordSysEnter, objs.RecordFork, objs.RecordExit
	case target.FromFilterLoad:
		var objs struct {
			recorderMaps
			RecordSysEnter *ebpf.Program `ebpf:"record_sys_enter"`
			RecordExec     *ebpf.Program `ebpf:"record_exec"`
		}
		err = spec.LoadAndAssign(&objs, opts)
		r.objs.recorderMaps = objs.recorderMaps
		r.objs.RecordSysEnter, r.objs.RecordExec = objs.RecordSysEnter, objs.RecordExec
	default:
		var objs struct {
			recorderMaps
			RecordSysEnter *ebpf.Program `ebpf:"record_sys_enter"`
		}
		err = spec.LoadAndAssign(&objs, opts)
		r.objs.recorderMaps = objs.recorderMaps
		r.objs.RecordSysEnter = objs.RecordSysEnter
	}
	if err != nil {
		return nil, newLoadError("recorder", err)
	}
	for _, k := range target.Keys {
		if err := r.addTarget(k); err != nil {
			r.Close()
			return nil, fmt.Errorf("add %s target %d: %w", target.Kind, k, err)
		}
	}
	// Fork tracking goes first, so that no process forked by a target
	// between the two attachments escapes.
	attach := []struct {
		name string
		prog *ebpf.Program
	}{
		{"sched_process_fork", r.objs.RecordFork},
		{"sched_process_exit", r.objs.RecordExit},
		{"sched_process_exec", r.objs.RecordExec},
		{"sys_enter", r.objs.RecordSysEnter},
	}
	for _, a := range attach {
		if a.prog == nil {
			continue
		}
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: a.name, Program: a.prog})
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("attach recorder to raw tracepoint %s: %w", a.name, err)
		}
		r.links = append(r.links, l)
	}
	return r, nil
}

// Target returns what the recorder records.
func (r *Recorder) Target() Target { return r.target }

// AddProcess adds a process to a process-tree target, e.g. a descendant
// found in /proc after the recorder was attached.
func (r *Recorder) AddProcess(pid uint32) error {
	if r.target.Kind != TargetProcessTree {
		return fmt.Errorf("add process %d: target is a %s, not a process tree", pid, r.target.Kind)
	}
	if err := r.addTarget(uint64(pid)); err != nil {
		return fmt.Errorf("add process %d: %w", pid, err)
	}
	return nil
}

// slotBits and slotMixed mirror SLOT_BITS and SLOT_MIXED in
// c/recorder.bpf.c: the direct-mapped table in front of the targets map.
const (
	slotBits  = 12
	slotMixed = ^uint64(0)
)

// slotOf mirrors slot_of in c/recorder.bpf.c.
func slotOf(key uint64) uint32 { return uint32((key * 0x9E3779B97F4A7C15) >> (64 - slotBits)) }

// addTarget puts key into the targets map and then into its slot, as the
// fork program does: the slot becomes key when it was empty and
// slotMixed when it held another key. It never empties a slot, so a lost
// race with the fork program only sends lookups to the targets map.
func (r *Recorder) addTarget(key uint64) error {
	if err := r.objs.Targets.Put(key, uint8(1)); err != nil {
		return err
	}
	s := slotOf(key)
	var v uint64
	if err := r.objs.TargetSlots.Lookup(s, &v); err != nil {
		return fmt.Errorf("read target slot %d: %w", s, err)
	}
	switch v {
	case key:
		return nil
	case 0:
		v = key
	default:
		v = slotMixed
	}
	if err := r.objs.TargetSlots.Update(s, v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write target slot %d: %w", s, err)
	}
	return nil
}

// SyscallCount is how many times the target entered one syscall.
type SyscallCount struct {
	// Nr is the syscall number for the native architecture, or
	// OtherSyscall.
	Nr uint32
	// Count is the number of entries seen.
	Count uint64
}

// Counts returns the syscalls seen so far, by ascending number; only
// syscalls seen at least once are listed.
func (r *Recorder) Counts() ([]SyscallCount, error) {
	var (
		out    []SyscallCount
		key    uint32
		values []uint64
	)
	it := r.objs.Counts.Iterate()
	for it.Next(&key, &values) {
		var sum uint64
		for _, v := range values {
			sum += v
		}
		if sum > 0 {
			out = append(out, SyscallCount{Nr: key, Count: sum})
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read recorder counts: %w", err)
	}
	slices.SortFunc(out, func(a, b SyscallCount) int { return int(a.Nr) - int(b.Nr) })
	return out, nil
}

// HandlersAtFilterLoad says, for a FromFilterLoad target, whether a
// process loaded its filter with a signal handler installed. Such a
// process may take a signal anywhere in its window and return from the
// handler through rt_sigreturn, even when no signal came while it was
// recorded, so a profile for what runs in that window must allow it.
func (r *Recorder) HandlersAtFilterLoad() (bool, error) {
	var v uint32
	if err := r.objs.HandlersAtLoad.Lookup(uint32(0), &v); err != nil {
		return false, fmt.Errorf("read recorder handlers_at_load: %w", err)
	}
	return v != 0, nil
}

// Close detaches the programs and releases the programs and maps. It is
// safe to call more than once.
func (r *Recorder) Close() error {
	var errs []error
	// Links first: a program must stop running before its maps go.
	for i := len(r.links) - 1; i >= 0; i-- {
		if err := r.links[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach recorder: %w", err))
		}
	}
	r.links = nil
	if err := r.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close recorder objects: %w", err))
	}
	r.objs = recorderLoaded{}
	return errors.Join(errs...)
}
