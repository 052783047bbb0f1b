package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// OOMHook names the kernel hook an OOM watcher is attached to.
type OOMHook string

// The hooks, from best to last resort. All four fire in mm/oom_kill.c's
// mark_oom_victim, once per task chosen to die.
const (
	// OOMHookFentry is a BTF trampoline on mark_oom_victim (5.5+): the
	// victim's task_struct gives pid, comm, cgroup and memory.
	OOMHookFentry OOMHook = "fentry/mark_oom_victim"
	// OOMHookRawTracepoint is the oom/mark_victim tracepoint attached as a
	// raw tracepoint, which is handed the tracepoint's arguments: since
	// 6.8 (and in kernels with that change backported, Debian's 6.1) the
	// victim's task_struct, so it sees what fentry sees, from a
	// tracepoint rather than a trampoline (a kernel that refuses tracing
	// programs takes it), and its detach does not wait for the RCU grace
	// periods a perf-event tracepoint's does. Where the argument is the
	// pid alone, this hook is refused (markVictimTakesTask).
	OOMHookRawTracepoint OOMHook = "raw_tracepoint/mark_victim"
	// OOMHookKprobe is a kprobe on mark_oom_victim, for kernels where
	// trampolines are unavailable; same detail as fentry.
	OOMHookKprobe OOMHook = "kprobe/mark_oom_victim"
	// OOMHookTracepoint is the oom/mark_victim tracepoint: stable, but it
	// carries no cgroup (and before 6.8 only the pid), so process, comm and
	// cgroup are known only when the victim is the task handling the OOM,
	// as in a memory cgroup's OOM where the victim is the allocating task.
	OOMHookTracepoint OOMHook = "tracepoint/oom/mark_victim"
)

// hookOf maps enum hook in c/oom.bpf.c to OOMHook.
func hookOf(v uint32) OOMHook {
	switch v {
	case 1:
		return OOMHookFentry
	case 2:
		return OOMHookKprobe
	case 3:
		return OOMHookTracepoint
	case 4:
		return OOMHookRawTracepoint
	}
	return OOMHook(fmt.Sprintf("unknown(%d)", v))
}

// DefaultOOMHooks is the order in which WatchOOM tries the hooks.
func DefaultOOMHooks() []OOMHook {
	return []OOMHook{OOMHookFentry, OOMHookRawTracepoint, OOMHookKprobe, OOMHookTracepoint}
}

// OOMTransport names how events travel from the kernel.
type OOMTransport string

// The transports: a BPF ring buffer (5.8+), or a per-CPU perf buffer where
// ring buffers are missing.
const (
	OOMTransportRingbuf OOMTransport = "ringbuf"
	OOMTransportPerf    OOMTransport = "perf"
)

// OOMEvent is one task marked as an OOM victim.
type OOMEvent struct {
	// Time is when the kernel marked the victim.
	Time time.Time
	// PID is the victim's thread id, TGID its process id; TGID is 0 when
	// the hook cannot see it (see OOMHookTracepoint).
	PID, TGID uint32
	// Comm is the victim's command name; empty when the hook cannot see it.
	Comm string
	// CgroupID is the victim's cgroup v2 id (the inode of its cgroup
	// directory); 0 when the hook cannot see it (see OOMHookTracepoint).
	CgroupID uint64
	// CgroupName and CgroupParentName are the names of the victim's
	// cgroup v2 directory and of its parent, read at the kill (a
	// container's "cri-containerd-<id>.scope" and its pod's slice with
	// the systemd driver); empty when the hook cannot see them. A kill
	// that takes its whole container (memory.oom.group) removes the
	// directory before user space could turn CgroupID into a path.
	CgroupName, CgroupParentName string
	// TotalVMBytes is the size of the victim's address space, RSSBytes its
	// resident file, anonymous and shmem memory, at the time of the kill.
	TotalVMBytes, RSSBytes uint64
	// OOMScoreAdj is the victim's oom_score_adj.
	OOMScoreAdj int32
	// Hook is the hook that reported the event.
	Hook OOMHook
}

// OOMOptions tunes WatchOOM; the zero value is the production setting.
type OOMOptions struct {
	// Hooks are tried in order; nil means DefaultOOMHooks.
	Hooks []OOMHook
	// Transport forces a transport; "" picks the ring buffer when the
	// kernel has it, else the perf buffer.
	Transport OOMTransport
	// Now is the wall clock used to date events; nil means time.Now.
	Now func() time.Time
	// Buffer is the capacity of the Events channel; 0 means 64.
	Buffer int
	// BTFCache holds the decoded kernel BTF for the CO-RE relocations and
	// the fentry target; nil decodes it afresh. Share one cache between
	// loads that run close together (the capability report) to decode
	// /sys/kernel/btf/vmlinux once.
	BTFCache *btf.Cache
}

// OOMWatcher delivers OOM kills on a channel until Close.
type OOMWatcher struct {
	hook      OOMHook
	transport OOMTransport
	events    chan OOMEvent
	prog      *ebpf.Program
	maps      []*ebpf.Map
	link      link.Link
	read      func() ([]byte, error)
	closeRd   func() error
	now       func() time.Time
	readErr   error // why the stream ended early; written by loop before close(loopDone)
	loopDone  chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// WatchOOM loads the OOM watcher, attaches it to the first hook in
// opts.Hooks that this kernel accepts and starts delivering events on
// Events. The error, when every hook fails, names each hook's failure.
//
// Before trying a hook that attaches through tracefs (the tracepoint, and
// the kprobe on a kernel without the kprobe PMU) it mounts tracefs at
// TracefsMountPoint if no tracefs is mounted in its mount namespace, which
// needs CAP_SYS_ADMIN; the mount stays (see ensureTracefs). Nothing else it
// attaches needs tracefs or bpffs: fentry attaches by BTF id, and nothing
// is pinned.
func WatchOOM(opts OOMOptions) (*OOMWatcher, error) {
	hooks := opts.Hooks
	if hooks == nil {
		hooks = DefaultOOMHooks()
	}
	transport := opts.Transport
	if transport == "" {
		transport = OOMTransportPerf
		if features.HaveMapType(ebpf.RingBuf) == nil {
			transport = OOMTransportRingbuf
		}
	}
	if transport != OOMTransportRingbuf && transport != OOMTransportPerf {
		return nil, fmt.Errorf("unknown OOM event transport %q", transport)
	}
	w := &OOMWatcher{
		transport: transport,
		events:    make(chan OOMEvent, 64),
		now:       opts.Now,
		loopDone:  make(chan struct{}),
		done:      make(chan struct{}),
	}
	if opts.Buffer > 0 {
		w.events = make(chan OOMEvent, opts.Buffer)
	}
	if w.now == nil {
		w.now = time.Now
	}
	// One parse of the embedded ELF, and one decoding of the kernel BTF,
	// serve every hook tried; each attempt works on its own copy.
	cache := opts.BTFCache
	if cache == nil {
		cache = btf.NewCache()
	}
	spec, err := loadOom()
	if err != nil {
		return nil, fmt.Errorf("parse the OOM watcher object: %w", err)
	}
	var errs []error
	// The tracepoint, and a kprobe without the kprobe PMU, attach through
	// tracefs, which is not mounted on every machine: it is mounted before
	// the first such hook is tried (see ensureTracefs), and not at all when
	// an earlier hook attaches.
	var tracefsErr error
	tracefsTried := false
	for _, h := range hooks {
		if h == OOMHookTracepoint || h == OOMHookKprobe && !kprobePMU("/sys") {
			if !tracefsTried {
				_, _, tracefsErr = ensureTracefs()
				tracefsTried = true
			}
			if tracefsErr != nil {
				errs = append(errs, fmt.Errorf("%s: %w", h, tracefsErr))
				continue
			}
		}
		err := w.attach(spec.Copy(), h, cache)
		if err == nil {
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", h, err))
	}
	if w.link == nil {
		return nil, fmt.Errorf("attach the OOM watcher: %w", errors.Join(errs...))
	}
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// attach loads the program for hook and its maps, attaches it and opens the
// reader; on failure it releases what it created.
func (w *OOMWatcher) attach(spec *ebpf.CollectionSpec, hook OOMHook, cache *btf.Cache) (err error) {
	useRingbuf := w.transport == OOMTransportRingbuf
	if err := spec.Variables[oomVarUseRingbuf].Set(useRingbuf); err != nil {
		return fmt.Errorf("set use_ringbuf: %w", err)
	}
	// The program references both maps; the branch for the other
	// transport is dead code to the verifier, but the map must still
	// exist. Stand in a one-entry array for the unused one, so that a
	// kernel without ring buffers (before 5.8) never creates one.
	placeholder := &ebpf.MapSpec{Name: "oom_unused", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	if useRingbuf {
		spec.Maps[oomMapOomEventsPb] = placeholder
	} else {
		spec.Maps[oomMapOomEventsRb] = placeholder
	}

	progName := map[OOMHook]string{
		OOMHookFentry:        oomProgOomVictimFentry,
		OOMHookRawTracepoint: oomProgOomVictimRawTracepoint,
		OOMHookKprobe:        oomProgOomVictimKprobe,
		OOMHookTracepoint:    oomProgOomVictimTracepoint,
	}[hook]
	if progName == "" {
		return fmt.Errorf("unknown hook")
	}
	if hook == OOMHookRawTracepoint {
		if err := markVictimTakesTask(cache); err != nil {
			return err
		}
	}
	// Only the chosen program is loaded.
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{
		Maps:      spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{progName: spec.Programs[progName]},
		Variables: spec.Variables,
		Types:     spec.Types,
	}, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return newLoadError("OOM watcher "+progName, err)
	}
	defer coll.Close()
	prog := coll.Programs[progName]

	var l link.Link
	switch hook {
	case OOMHookFentry:
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	case OOMHookRawTracepoint:
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "mark_victim", Program: prog})
	case OOMHookKprobe:
		l, err = link.Kprobe("mark_oom_victim", prog, nil)
	case OOMHookTracepoint:
		l, err = link.Tracepoint("oom", "mark_victim", prog, nil)
	}
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()

	events := coll.Maps[oomMapOomEventsPb]
	if useRingbuf {
		events = coll.Maps[oomMapOomEventsRb]
		rd, err := ringbuf.NewReader(events)
		if err != nil {
			return fmt.Errorf("open ring buffer reader: %w", err)
		}
		w.read = func() ([]byte, error) {
			rec, err := rd.Read()
			return rec.RawSample, err
		}
		w.closeRd = rd.Close
	} else {
		rd, err := perf.NewReader(events, os.Getpagesize())
		if err != nil {
			return fmt.Errorf("open perf buffer reader: %w", err)
		}
		w.read = func() ([]byte, error) {
			for {
				rec, err := rd.Read()
				if err != nil {
					return nil, err
				}
				if rec.LostSamples > 0 {
					continue // overwritten in a full buffer
				}
				return rec.RawSample, nil
			}
		}
		w.closeRd = rd.Close
	}
	// Keep what the watcher uses; coll.Close releases the rest.
	w.prog = coll.DetachProgram(progName)
	w.maps = []*ebpf.Map{coll.DetachMap(oomMapOomEventsRb), coll.DetachMap(oomMapOomEventsPb)}
	w.link = l
	w.hook = hook
	return nil
}

// markVictimTakesTask says whether the kernel hands the oom/mark_victim
// tracepoint's probes the victim's task_struct, which the raw tracepoint
// program reads. The kernel's BTF has a typedef for each tracepoint's
// probe, btf_trace_<name>, void (*)(void *, <TP_PROTO>...): for mark_victim
// (include/trace/events/oom.h) the first argument after the data pointer
// is struct task_struct * since 6.8 (and where that change was
// backported), an int pid before. Any other answer, or a kernel without
// the typedef, is an error wrapping ebpf.ErrNotSupported; one without
// kernel BTF is cache's error.
func markVictimTakesTask(cache *btf.Cache) error {
	spec, err := cache.Kernel()
	if err != nil {
		return fmt.Errorf("kernel BTF: %w", err)
	}
	return tracepointTakesTask(spec, "mark_victim")
}

// tracepointTakesTask is markVictimTakesTask for tracepoint tp in spec.
func tracepointTakesTask(spec *btf.Spec, tp string) error {
	name := "btf_trace_" + tp
	var td *btf.Typedef
	if err := spec.TypeByName(name, &td); err != nil {
		return fmt.Errorf("%w: %s in the kernel BTF: %w", ebpf.ErrNotSupported, name, err)
	}
	var arg btf.Type
	if ptr, ok := btf.UnderlyingType(td).(*btf.Pointer); ok {
		if proto, ok := ptr.Target.(*btf.FuncProto); ok && len(proto.Params) >= 2 {
			arg = proto.Params[1].Type
		}
	}
	if ptr, ok := btf.UnderlyingType(arg).(*btf.Pointer); ok {
		if st, ok := btf.UnderlyingType(ptr.Target).(*btf.Struct); ok && st.Name == "task_struct" {
			return nil
		}
	}
	return fmt.Errorf("%w: %s passes %s, not the victim's task_struct (%s before Linux 6.8)", ebpf.ErrNotSupported, name, cType(arg), tp)
}

// cType spells a BTF type roughly as C does, for an error message.
func cType(t btf.Type) string {
	switch t := t.(type) {
	case nil:
		return "nothing"
	case *btf.Pointer:
		return cType(t.Target) + " *"
	case *btf.Const:
		return "const " + cType(t.Type)
	case *btf.Volatile:
		return "volatile " + cType(t.Type)
	case *btf.Struct:
		return "struct " + t.Name
	case *btf.Union:
		return "union " + t.Name
	case *btf.Void:
		return "void"
	}
	if name := t.TypeName(); name != "" {
		return name
	}
	return fmt.Sprintf("%T", t)
}

// markedAgainWindow is how long after an event of a task another event of
// the same task (pid, tgid and cgroup) is taken for the same marking.
const markedAgainWindow = uint64(time.Second)

// recentVictims remembers the last events' tasks: mark_oom_victim's entry
// (the fentry and kprobe hooks) fires again for a task the kernel already
// marked, which it then leaves at its TIF_MEMDIE test (mm/oom_kill.c; the
// tracepoints fire after that test, once): a kill that takes the whole
// cgroup (memory.oom.group) marks the chosen victim, then every task of the
// cgroup, the victim again among them.
type recentVictims struct {
	keys [16]victimKey
	next int
}

type victimKey struct {
	pid, tgid uint32
	cgroupID  uint64
	rawTime   uint64
}

// again says whether e is another event of a task that an event up to
// markedAgainWindow before it named, and remembers e otherwise.
func (r *recentVictims) again(e decodedOOMEvent) bool {
	k := victimKey{pid: e.PID, tgid: e.TGID, cgroupID: e.CgroupID, rawTime: e.rawTime}
	for _, seen := range r.keys {
		if seen.rawTime != 0 && seen.pid == k.pid && seen.tgid == k.tgid && seen.cgroupID == k.cgroupID &&
			k.rawTime >= seen.rawTime && k.rawTime-seen.rawTime <= markedAgainWindow {
			return true
		}
	}
	r.keys[r.next] = k
	r.next = (r.next + 1) % len(r.keys)
	return false
}

func (w *OOMWatcher) loop() {
	defer w.wg.Done()
	defer close(w.events)
	defer close(w.loopDone)
	var recent recentVictims
	for {
		raw, err := w.read()
		if err != nil {
			// ErrClosed after Close; any other error ends the stream too,
			// since the reader cannot recover from it.
			if !errors.Is(err, os.ErrClosed) {
				w.readErr = fmt.Errorf("read OOM events: %w", err)
			}
			return
		}
		ev, err := decodeOOMEvent(raw)
		if err != nil {
			continue // undecodable
		}
		if recent.again(ev) {
			continue
		}
		var mono unix.Timespec
		now := w.now()
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) == nil {
			ev.Time = now.Add(-time.Duration(mono.Nano() - int64(ev.rawTime)))
		}
		select {
		case w.events <- ev.OOMEvent:
		case <-w.done:
			return
		}
	}
}

// Events returns the channel of OOM events; it is closed by Close.
func (w *OOMWatcher) Events() <-chan OOMEvent { return w.events }

// Err returns why Events was closed before Close was called, once it is
// closed; nil after a Close.
func (w *OOMWatcher) Err() error {
	select {
	case <-w.loopDone:
		return w.readErr
	default:
		return nil
	}
}

// Hook returns the hook the watcher is attached to.
func (w *OOMWatcher) Hook() OOMHook { return w.hook }

// Transport returns how events reach nodeshim.
func (w *OOMWatcher) Transport() OOMTransport { return w.transport }

// Close detaches the watcher, releases its programs and maps and closes
// the Events channel. It is safe to call more than once.
func (w *OOMWatcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		var errs []error
		if err := w.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach OOM watcher: %w", err))
		}
		if err := w.closeRd(); err != nil {
			errs = append(errs, fmt.Errorf("close OOM event reader: %w", err))
		}
		w.wg.Wait()
		if err := w.prog.Close(); err != nil {
			errs = append(errs, err)
		}
		for _, m := range w.maps {
			if err := m.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		w.closeErr = errors.Join(errs...)
	})
	return w.closeErr
}

// cString is the NUL-terminated string at the start of b.
func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// decodedOOMEvent is an OOMEvent before its monotonic timestamp is turned
// into wall time.
type decodedOOMEvent struct {
	OOMEvent
	rawTime uint64
}

// ErrShortOOMEvent is wrapped by decodeOOMEvent for a record too short for
// struct oom_event.
var ErrShortOOMEvent = errors.New("OOM event record too short")

// decodeOOMEvent decodes one struct oom_event record (native byte order,
// the layout of oomOomEvent that bpf2go generated from the C struct).
func decodeOOMEvent(raw []byte) (decodedOOMEvent, error) {
	var e oomOomEvent
	if _, err := binary.Decode(raw, binary.NativeEndian, &e); err != nil {
		return decodedOOMEvent{}, fmt.Errorf("%w (%d bytes): %w", ErrShortOOMEvent, len(raw), err)
	}
	unit := uint64(os.Getpagesize())
	if e.MemInKib != 0 {
		unit = 1024
	}
	return decodedOOMEvent{
		OOMEvent: OOMEvent{
			PID:              e.Pid,
			TGID:             e.Tgid,
			Comm:             cString(e.Comm[:]),
			CgroupID:         e.CgroupId,
			CgroupName:       cString(e.CgroupName[:]),
			CgroupParentName: cString(e.CgroupParentName[:]),
			TotalVMBytes:     e.TotalVm * unit,
			RSSBytes:         e.Rss * unit,
			OOMScoreAdj:      e.OomScoreAdj,
			Hook:             hookOf(e.Hook),
		},
		rawTime: e.TimestampNs,
	}, nil
}
