package bpf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/cgroup"
)

// The flags of a cgroup_stat record (c/cgroupstats.bpf.c).
const (
	statHasPSI      = 1
	statPSIDisabled = 2
	statHasMemcg    = 4
)

// DefaultCgroupStatsCapacity is the number of cgroups a pass holds before
// CgroupStats grows its map: kubelet's 110 pods and their QoS cgroups
// several times over, in 152 KiB of kernel memory.
const DefaultCgroupStatsCapacity = 512

// maxCgroupStatsCapacity bounds the map's growth: 1<<18 records of 304
// bytes are 76 MiB of kernel memory.
const maxCgroupStatsCapacity = 1 << 18

// CgroupStatsOptions configures OpenCgroupStats.
type CgroupStatsOptions struct {
	// HZ is the kernel's CONFIG_HZ, which sets PSI's averaging period
	// (cgroup.PSIPeriod). When zero, OpenCgroupStats measures it: it
	// counts the kernel's jiffies over 250 ms of two passes over
	// Calibrate, a cgroup2 directory.
	HZ        int
	Calibrate string
	// LocalEvents is set when cgroup2 is mounted with memory_localevents:
	// memory.events then shows the cgroup's own events.
	LocalEvents bool
	// Capacity is the number of cgroups the first pass holds;
	// DefaultCgroupStatsCapacity when zero. A larger pass grows it.
	Capacity int
}

// CgroupStats reads the PSI and memory counters of every cgroup in a
// cgroup v2 subtree in one kernel pass: a BPF cgroup iterator (Linux 6.1+)
// walks the subtree in pre-order and copies each cgroup's PSI group and
// memory counters into a memory-mapped array, so a pass costs two system
// calls however many cgroups it reads, and no file descriptor per cgroup.
// It implements cgroup.PassSource. It is safe for concurrent use; passes
// run one at a time.
type CgroupStats struct {
	opts       CgroupStatsOptions
	period     time.Duration
	pageSize   uint64
	hzMeasured bool
	cache      *btf.Cache

	mu       sync.Mutex
	objs     *cgroupstatsObjects
	mem      *ebpf.Memory
	capacity int
	buf      []byte
}

// OpenCgroupStats loads the cgroup iterator program. It fails, with the
// kernel's reason, where cgroup iterators (6.1), BTF or memory-mapped
// arrays are missing, or without CAP_BPF and CAP_PERFMON.
func OpenCgroupStats(opts CgroupStatsOptions) (*CgroupStats, error) {
	return openCgroupStats(opts, nil)
}

// openCgroupStats is OpenCgroupStats with a shared kernel BTF cache (nil
// decodes the kernel's BTF for this load alone).
func openCgroupStats(opts CgroupStatsOptions, cache *btf.Cache) (*CgroupStats, error) {
	if opts.HZ == 0 && opts.Calibrate == "" {
		return nil, errors.New("cgroup stats pass: neither CONFIG_HZ nor a cgroup to measure it over")
	}
	if opts.HZ != 0 {
		if _, err := cgroup.PSIPeriod(opts.HZ); err != nil {
			return nil, fmt.Errorf("cgroup stats pass: %w", err)
		}
	}
	if opts.Capacity <= 0 {
		opts.Capacity = DefaultCgroupStatsCapacity
	}
	c := &CgroupStats{opts: opts, pageSize: uint64(os.Getpagesize()), cache: cache}
	if err := c.load(min(opts.Capacity, maxCgroupStatsCapacity)); err != nil {
		return nil, err
	}
	if c.opts.HZ == 0 {
		hz, err := c.measureHZ(opts.Calibrate, calibrationTime)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.opts.HZ, c.hzMeasured = hz, true
	}
	c.period, _ = cgroup.PSIPeriod(c.opts.HZ)
	return c, nil
}

// calibrationTime is how long measureHZ counts jiffies: 25 at the lowest
// HZ, and 250 and 300 differ by 12 jiffies.
const calibrationTime = 250 * time.Millisecond

// measureHZ counts the kernel's jiffies between two passes over dir's
// cgroup, d apart, and returns the CONFIG_HZ that explains them.
func (c *CgroupStats) measureHZ(dir string, d time.Duration) (int, error) {
	sample := func() (j, ns uint64, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, err := c.run(dir, 0); err != nil {
			return 0, 0, err
		}
		if err := c.objs.RootJiffies.Get(&j); err != nil {
			return 0, 0, err
		}
		err = c.objs.RootNs.Get(&ns)
		return j, ns, err
	}
	j0, t0, err := sample()
	if err != nil {
		return 0, fmt.Errorf("cgroup stats pass: measure CONFIG_HZ: %w", err)
	}
	time.Sleep(d)
	j1, t1, err := sample()
	if err != nil {
		return 0, fmt.Errorf("cgroup stats pass: measure CONFIG_HZ: %w", err)
	}
	return hzOf(j1-j0, time.Duration(t1-t0))
}

// hzOf returns the CONFIG_HZ at which jiffies ticks take elapsed: the
// kernel's frequency nearest the rate, within two ticks of it.
func hzOf(jiffies uint64, elapsed time.Duration) (int, error) {
	if elapsed <= 0 {
		return 0, fmt.Errorf("cgroup stats pass: measure CONFIG_HZ: no time elapsed")
	}
	rate := float64(jiffies) / elapsed.Seconds()
	slack := 2 / elapsed.Seconds()
	for _, hz := range []int{100, 250, 300, 1000} {
		if math.Abs(rate-float64(hz)) <= slack {
			return hz, nil
		}
	}
	return 0, fmt.Errorf("cgroup stats pass: %d jiffies in %s (%.0f Hz) match no CONFIG_HZ (100, 250, 300, 1000)", jiffies, elapsed, rate)
}

// load (re)loads the program with a map of capacity records.
func (c *CgroupStats) load(capacity int) error {
	spec, err := loadCgroupstats()
	if err != nil {
		return newLoadError("cgroup stats pass", err)
	}
	spec.Maps[cgroupstatsMapCgroupStats].MaxEntries = uint32(capacity)
	if err := spec.Variables[cgroupstatsVarCapacity].Set(uint32(capacity)); err != nil {
		return fmt.Errorf("cgroup stats pass: set capacity: %w", err)
	}
	if err := spec.Variables[cgroupstatsVarLocalEvents].Set(c.opts.LocalEvents); err != nil {
		return fmt.Errorf("cgroup stats pass: set local_events: %w", err)
	}
	var objs cgroupstatsObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Cache: c.cache}); err != nil {
		return newLoadError("cgroup stats pass", err)
	}
	mem, err := objs.CgroupStats.Memory()
	if err != nil {
		objs.Close()
		return fmt.Errorf("cgroup stats pass: map the records: %w", err)
	}
	if c.objs != nil {
		c.objs.Close()
	}
	c.objs, c.mem, c.capacity = &objs, mem, capacity
	return nil
}

// Close releases the program and its map.
func (c *CgroupStats) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.objs == nil {
		return nil
	}
	err := c.objs.Close()
	c.objs, c.mem = nil, nil
	return err
}

// Describe says how a pass reads.
func (c *CgroupStats) Describe() string {
	from := "from the kernel config"
	if c.hzMeasured {
		from = "measured"
	}
	return fmt.Sprintf("a BPF cgroup iterator reads each pod's PSI and memory counters in one kernel pass (CONFIG_HZ %d %s, PSI period %s)",
		c.opts.HZ, from, c.period)
}

// HZ returns the CONFIG_HZ the pass works with, and whether it was
// measured rather than given.
func (c *CgroupStats) HZ() (hz int, measured bool) { return c.opts.HZ, c.hzMeasured }

// Pass implements cgroup.PassSource.
func (c *CgroupStats) Pass(dir string, depth int, fn func(*cgroup.PassStats)) error {
	if depth < 0 {
		return fmt.Errorf("cgroup stats pass of %s: depth %d is negative", dir, depth)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.objs == nil {
		return fmt.Errorf("cgroup stats pass of %s: closed", dir)
	}
	n, err := c.run(dir, depth)
	if err != nil {
		return err
	}
	if n > c.capacity {
		// The subtree outgrew the map: load a larger one and walk again.
		want := min(max(2*c.capacity, n+n/4), maxCgroupStatsCapacity)
		if want < n {
			return fmt.Errorf("cgroup stats pass of %s: %d cgroups, more than the %d a pass holds", dir, n, maxCgroupStatsCapacity)
		}
		if err := c.load(want); err != nil {
			return err
		}
		if n, err = c.run(dir, depth); err != nil {
			return err
		}
		if n > c.capacity {
			return fmt.Errorf("cgroup stats pass of %s: %d cgroups after growing to %d", dir, n, c.capacity)
		}
	}
	const size = int(unsafe.Sizeof(cgroupstatsCgroupStat{}))
	if cap(c.buf) < n*size {
		c.buf = make([]byte, n*size)
	}
	buf := c.buf[:n*size]
	if _, err := c.mem.ReadAt(buf, 0); err != nil {
		return fmt.Errorf("cgroup stats pass of %s: read the records: %w", dir, err)
	}
	var out cgroup.PassStats
	for i := range n {
		decodeCgroupStat((*cgroupstatsCgroupStat)(unsafe.Pointer(&buf[i*size])), c.pageSize, c.period, &out)
		fn(&out)
	}
	return nil
}

// run walks dir's subtree once and returns the number of cgroups seen,
// which exceeds the capacity when records were dropped.
func (c *CgroupStats) run(dir string, depth int) (int, error) {
	v := &c.objs.cgroupstatsVariables
	if err := v.Seen.Set(uint32(0)); err != nil {
		return 0, fmt.Errorf("cgroup stats pass of %s: reset: %w", dir, err)
	}
	if err := v.RootLevel.Set(int32(-1)); err != nil {
		return 0, fmt.Errorf("cgroup stats pass of %s: reset: %w", dir, err)
	}
	if err := v.MaxDepth.Set(uint32(depth)); err != nil {
		return 0, fmt.Errorf("cgroup stats pass of %s: set depth: %w", dir, err)
	}
	it, err := attachCgroupIter(c.objs.CgroupStatsPass, dir)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	r, err := it.Open()
	if err != nil {
		return 0, fmt.Errorf("cgroup stats pass of %s: open the iterator: %w", dir, err)
	}
	// The program writes no output: the read returns at the end of the
	// walk.
	_, err = io.Copy(io.Discard, r)
	r.Close()
	if err != nil {
		return 0, fmt.Errorf("cgroup stats pass of %s: %w", dir, err)
	}
	var seen uint32
	if err := v.Seen.Get(&seen); err != nil {
		return 0, fmt.Errorf("cgroup stats pass of %s: count: %w", dir, err)
	}
	return int(seen), nil
}

// bpfIterLinkInfoCgroup is the cgroup member of union bpf_iter_link_info
// (include/uapi/linux/bpf.h): the walk's order and its root.
type bpfIterLinkInfoCgroup struct {
	order    uint32
	cgroupFd uint32
	cgroupID uint64
}

// bpfLinkCreateIter is union bpf_attr's link_create for an iterator.
type bpfLinkCreateIter struct {
	progFd      uint32
	targetFd    uint32
	attachType  uint32
	flags       uint32
	iterInfo    uint64
	iterInfoLen uint32
	_           uint32
}

const (
	bpfLinkCreate               = 28 // enum bpf_cmd BPF_LINK_CREATE
	bpfTraceIter                = 28 // enum bpf_attach_type BPF_TRACE_ITER
	bpfCgroupIterDescendantsPre = 2  // enum bpf_cgroup_iter_order
)

// attachCgroupIter creates an iterator link of prog over dir's subtree in
// pre-order. cilium/ebpf's link.AttachIter passes a map only, so the link
// is created here and handed to link.NewFromFD.
func attachCgroupIter(prog *ebpf.Program, dir string) (*link.Iter, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("cgroup stats pass of %s: %w", dir, cgroup.ErrVanished)
		}
		return nil, fmt.Errorf("cgroup stats pass: open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	info := bpfIterLinkInfoCgroup{order: bpfCgroupIterDescendantsPre, cgroupFd: uint32(fd)}
	attr := bpfLinkCreateIter{
		progFd:      uint32(prog.FD()),
		attachType:  bpfTraceIter,
		iterInfo:    uint64(uintptr(unsafe.Pointer(&info))),
		iterInfoLen: uint32(unsafe.Sizeof(info)),
	}
	lfd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&info)
	runtime.KeepAlive(prog)
	if errno != 0 {
		return nil, fmt.Errorf("cgroup stats pass: create a cgroup iterator over %s: %w", dir, errno)
	}
	l, err := link.NewFromFD(int(lfd))
	if err != nil {
		return nil, fmt.Errorf("cgroup stats pass: iterator link over %s: %w", dir, err)
	}
	it, ok := l.(*link.Iter)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("cgroup stats pass: link over %s is a %T, not an iterator", dir, l)
	}
	return it, nil
}

// pageCounterMax is the kernel's PAGE_COUNTER_MAX on a 64-bit kernel
// (LONG_MAX / PAGE_SIZE), the memory.max that the file prints as "max".
func pageCounterMax(pageSize uint64) uint64 { return (1<<63 - 1) / pageSize }

// Why a record lacks figures; shared, so that a pass over thousands of
// cgroups without the memory controller does not allocate an error each.
var (
	errNoPSIGroup  = fmt.Errorf("the cgroup has no PSI group (the root's is /proc/pressure's): %w", cgroup.ErrMissing)
	errPSIDisabled = fmt.Errorf("PSI is disabled in the cgroup (cgroup.pressure is 0): %w", cgroup.ErrMissing)
	errNoMemcg     = fmt.Errorf("the memory controller is not enabled in the cgroup: %w", cgroup.ErrMissing)
)

// decodeCgroupStat fills out from one record, with the PSI figures as
// psi_show would print them when the record was taken (cgroup.PSIGroupState.At,
// on the BPF clock, CLOCK_MONOTONIC, for the kernel's sched_clock: both
// count from boot, and only the number of whole periods missed depends on
// the difference).
func decodeCgroupStat(r *cgroupstatsCgroupStat, pageSize uint64, period time.Duration, out *cgroup.PassStats) {
	*out = cgroup.PassStats{ID: r.Id, Level: int(r.Level)}
	var perr error
	switch {
	case r.Flags&statHasPSI == 0:
		perr = errNoPSIGroup
	case r.Flags&statPSIDisabled != 0:
		perr = errPSIDisabled
	default:
		g := cgroup.PSIGroupState{Total: r.PsiTotal, AvgTotal: r.PsiAvgTotal,
			AvgLastUpdate: r.PsiAvgLastUpdate, AvgNextUpdate: r.PsiAvgNextUpdate}
		for s := range g.Avg {
			g.Avg[s] = [3]uint64{r.PsiAvg[3*s], r.PsiAvg[3*s+1], r.PsiAvg[3*s+2]}
		}
		for i, p := range g.At(r.NowNs, period) {
			out.Pressure[i] = cgroup.Pressure{PSI: p}
		}
	}
	if perr != nil {
		for i := range out.Pressure {
			out.Pressure[i] = cgroup.Pressure{Err: perr}
		}
	}
	if r.Flags&statHasMemcg == 0 {
		out.Memory.Err = errNoMemcg
		return
	}
	out.Memory.Current = r.MemUsagePages * pageSize
	if r.MemMaxPages >= pageCounterMax(pageSize) {
		out.Memory.Max = cgroup.Limit{Unlimited: true}
	} else {
		out.Memory.Max = cgroup.Limit{Value: r.MemMaxPages * pageSize}
	}
	out.OOMKill = r.MemOomKill
}
