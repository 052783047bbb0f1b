package cgroup

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrMissing marks a value that is unknown because its file does not exist in
// a live cgroup: the controller is not enabled there (not in the parent's
// cgroup.subtree_control, or bound to a v1 hierarchy on a hybrid node), or the
// file never exists at that level (memory.current at the root).
var ErrMissing = errors.New("not available in this cgroup")

// ErrVanished marks a value that is unknown because the cgroup was removed
// before or while it was read (a pod or container that just ended).
var ErrVanished = errors.New("cgroup vanished")

// ErrMalformed marks a value that is unknown because its file did not parse.
var ErrMalformed = errors.New("malformed cgroup file")

// Mask selects which groups of stats Reader.Read collects.
type Mask uint32

// The stat groups.
const (
	StatMemory Mask = 1 << iota
	StatMemoryEvents
	StatPids
	StatCPU
	StatIO
	StatPressure

	// StatAll collects every group.
	StatAll = StatMemory | StatMemoryEvents | StatPids | StatCPU | StatIO | StatPressure

	// statMemoryStat reads memory.stat alone into Stats.Memory, leaving
	// its Current and Max as they are (the pods pass, whose PassSource
	// reads those).
	statMemoryStat Mask = 1 << 31
)

// Limit is a cgroup limit file's value: a number of bytes or tasks, or "max".
type Limit struct {
	Value     uint64
	Unlimited bool
}

// MemoryStats holds a cgroup's memory use (memory.current, memory.max,
// memory.stat). Err is non-nil, wrapping ErrMissing, ErrVanished or
// ErrMalformed, when the values are unknown; they are then zero and must not
// be read as such.
type MemoryStats struct {
	Err                      error
	Current                  uint64
	Max                      Limit
	Anon, File               uint64
	ActiveFile, InactiveFile uint64
}

// WorkingSet is kubelet's working set: usage minus inactive_file, floored at
// zero (pkg/kubelet/eviction, via cAdvisor's container_memory_working_set_bytes).
func (m MemoryStats) WorkingSet() uint64 {
	if m.InactiveFile > m.Current {
		return 0
	}
	return m.Current - m.InactiveFile
}

// MemoryEvents holds the counters of memory.events (hierarchical: they
// include the events of descendants).
type MemoryEvents struct {
	Err                                    error
	Low, High, Max, OOM, OOMKill, OOMGroup uint64
}

// PidsStats holds pids.current and pids.max.
type PidsStats struct {
	Err     error
	Current uint64
	Max     Limit
}

// CPUStats holds the fields of cpu.stat kubelet and operators use. The
// throttling fields exist only where the cpu controller is enabled; the
// usage fields exist in every cgroup2 cgroup.
type CPUStats struct {
	Err                                   error
	UsageUsec, UserUsec, SystemUsec       uint64
	NrPeriods, NrThrottled, ThrottledUsec uint64
}

// IOStats holds io.stat summed over devices.
type IOStats struct {
	Err                                      error
	ReadBytes, WriteBytes, ReadIOs, WriteIOs uint64
}

// Pressure is one PSI file's content, or why it is unknown.
type Pressure struct {
	Err error
	PSI PSI
}

// Stats is one cgroup's statistics. Each group carries its own Err, so one
// missing controller leaves the others readable.
type Stats struct {
	Memory       MemoryStats
	MemoryEvents MemoryEvents
	Pids         PidsStats
	CPU          CPUStats
	IO           IOStats
	// Pressure is indexed like Resources: cpu, memory, io.
	Pressure [len(Resources)]Pressure
}

// PressureOf returns the pressure of resource r.
func (s *Stats) PressureOf(r Resource) Pressure {
	for i, x := range Resources {
		if x == r {
			return s.Pressure[i]
		}
	}
	return Pressure{Err: fmt.Errorf("resource %q: %w", r, ErrMissing)}
}

// The files Read reads, each with its slot in a kept cgroup (keptGroup.fds).
var (
	fMemoryCurrent = keptCname("memory.current", 0)
	fMemoryMax     = keptCname("memory.max", 1)
	fMemoryStat    = keptCname("memory.stat", 2)
	fMemoryEvents  = keptCname("memory.events", 3)
	fPidsCurrent   = keptCname("pids.current", 4)
	fPidsMax       = keptCname("pids.max", 5)
	fCPUStat       = keptCname("cpu.stat", 6)
	fIOStat        = keptCname("io.stat", 7)
	fPressure      = [len(Resources)]cname{keptCname("cpu.pressure", 8), keptCname("memory.pressure", 9), keptCname("io.pressure", 10)}
)

// nKept is the number of files of a cgroup a Reader can keep open.
const nKept = 11

// Reader reads cgroup stats with a reused buffer, so that a pass over many
// cgroups does not allocate per file. A Reader made by NewKeepReader also
// keeps each cgroup's files open between passes. A Reader is not safe for
// concurrent use.
type Reader struct {
	buf  []byte
	keep *keeper
	// cur is the kept cgroup Read is reading, nil outside Read or when
	// the cgroup is read by opening its files.
	cur *keptGroup
	// stale is set when a kept file failed during Read: the cgroup was
	// removed, or a controller disabled, since the file was opened.
	stale bool
	// curDir is the directory of r.cur while Read has it open, else -1.
	curDir int
	// pass, when set, reads the pods' PSI and memory counters in one
	// kernel pass (ReadPodUsage); passed holds its last pass by cgroup id.
	pass   PassSource
	passed map[uint64]PassStats
}

// NewReader returns a Reader that opens and closes each file it reads.
func NewReader() *Reader { return &Reader{buf: make([]byte, 0, 8192), curDir: -1} }

// Read fills out with the stats of the cgroup directory dir selected by mask.
// It returns an error (wrapping ErrVanished when the cgroup is gone) only
// when the directory itself cannot be opened; a file that is missing or
// disappears sets the Err of its group. Groups not in mask are left
// untouched.
func (r *Reader) Read(dir string, mask Mask, out *Stats) error {
	if r.keep != nil {
		return r.readKept(dir, mask, out)
	}
	fd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer closeFd(fd)
	r.read(fd, dir, mask, out)
	return nil
}

// read fills out from the cgroup dir, open as fd (-1 when it is a kept
// cgroup, r.cur).
func (r *Reader) read(fd int, dir string, mask Mask, out *Stats) {
	if mask&StatMemory != 0 {
		out.Memory = r.readMemory(fd, dir)
	} else if mask&statMemoryStat != 0 && out.Memory.Err == nil {
		if err := r.readMemoryStat(fd, dir, &out.Memory); err != nil {
			out.Memory = MemoryStats{Err: err}
		}
	}
	if mask&StatMemoryEvents != 0 {
		out.MemoryEvents = MemoryEvents{}
		ev := &out.MemoryEvents
		ev.Err = r.readFields(fd, dir, fMemoryEvents, []field{
			{"low", &ev.Low}, {"high", &ev.High}, {"max", &ev.Max},
			{"oom", &ev.OOM}, {"oom_kill", &ev.OOMKill}, {"oom_group_kill", &ev.OOMGroup},
		})
	}
	if mask&StatPids != 0 {
		out.Pids = PidsStats{}
		out.Pids.Current, out.Pids.Err = r.readUint(fd, dir, fPidsCurrent)
		if out.Pids.Err == nil {
			out.Pids.Max, out.Pids.Err = r.readLimit(fd, dir, fPidsMax)
		}
		if out.Pids.Err != nil {
			out.Pids = PidsStats{Err: out.Pids.Err}
		}
	}
	if mask&StatCPU != 0 {
		out.CPU = CPUStats{}
		c := &out.CPU
		c.Err = r.readFields(fd, dir, fCPUStat, []field{
			{"usage_usec", &c.UsageUsec}, {"user_usec", &c.UserUsec}, {"system_usec", &c.SystemUsec},
			{"nr_periods", &c.NrPeriods}, {"nr_throttled", &c.NrThrottled}, {"throttled_usec", &c.ThrottledUsec},
		})
		if c.Err != nil {
			*c = CPUStats{Err: c.Err}
		}
	}
	if mask&StatIO != 0 {
		out.IO = r.readIO(fd, dir)
	}
	if mask&StatPressure != 0 {
		for i := range Resources {
			out.Pressure[i] = r.readPressure(fd, dir, fPressure[i])
		}
	}
}

func (r *Reader) readMemory(fd int, dir string) MemoryStats {
	var m MemoryStats
	var err error
	if m.Current, err = r.readUint(fd, dir, fMemoryCurrent); err != nil {
		return MemoryStats{Err: err}
	}
	if m.Max, err = r.readLimit(fd, dir, fMemoryMax); err != nil {
		return MemoryStats{Err: err}
	}
	if err := r.readMemoryStat(fd, dir, &m); err != nil {
		return MemoryStats{Err: err}
	}
	return m
}

// readMemoryStat fills m's memory.stat figures.
func (r *Reader) readMemoryStat(fd int, dir string, m *MemoryStats) error {
	seen := 0
	err := r.readKV(fd, dir, fMemoryStat, func(k []byte, v uint64) {
		switch string(k) {
		case "anon":
			m.Anon = v
		case "file":
			m.File = v
		case "active_file":
			m.ActiveFile = v
		case "inactive_file":
			m.InactiveFile = v
			seen++
		}
	})
	if err == nil && seen == 0 {
		err = fmt.Errorf("%s/%s: no inactive_file: %w", dir, fMemoryStat.s, ErrMalformed)
	}
	return err
}

func (r *Reader) readIO(fd int, dir string) IOStats {
	data, err := r.fetch(fd, dir, fIOStat)
	if err != nil {
		return IOStats{Err: err}
	}
	var s IOStats
	// "MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N" per device;
	// an empty file means no IO was accounted yet.
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		_, rest, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			return IOStats{Err: fmt.Errorf("%s/%s: line %q: %w", dir, fIOStat.s, clip(line), ErrMalformed)}
		}
		for len(rest) > 0 {
			var kv []byte
			kv, rest, _ = bytes.Cut(rest, []byte{' '})
			k, vb, ok := bytes.Cut(kv, []byte{'='})
			v, vok := atou(vb)
			if !ok || !vok || len(vb) == 0 || digits(vb) != len(vb) {
				return IOStats{Err: fmt.Errorf("%s/%s: field %q: %w", dir, fIOStat.s, clip(kv), ErrMalformed)}
			}
			switch string(k) {
			case "rbytes":
				s.ReadBytes += v
			case "wbytes":
				s.WriteBytes += v
			case "rios":
				s.ReadIOs += v
			case "wios":
				s.WriteIOs += v
			}
		}
	}
	return s
}

func (r *Reader) readPressure(fd int, dir string, name cname) Pressure {
	data, err := r.fetch(fd, dir, name)
	if err != nil {
		return Pressure{Err: err}
	}
	p, err := ParsePSI(data)
	if err != nil {
		return Pressure{Err: fmt.Errorf("%s/%s: %w (%w)", dir, name.s, ErrMalformed, err)}
	}
	return Pressure{PSI: p}
}

func (r *Reader) readUint(fd int, dir string, name cname) (uint64, error) {
	data, err := r.fetch(fd, dir, name)
	if err != nil {
		return 0, err
	}
	v, ok := parseUintLine(data)
	if !ok {
		return 0, fmt.Errorf("%s/%s: %q: %w", dir, name.s, clip(data), ErrMalformed)
	}
	return v, nil
}

func (r *Reader) readLimit(fd int, dir string, name cname) (Limit, error) {
	data, err := r.fetch(fd, dir, name)
	if err != nil {
		return Limit{}, err
	}
	l, ok := ParseLimit(data)
	if !ok {
		return Limit{}, fmt.Errorf("%s/%s: %q: %w", dir, name.s, clip(data), ErrMalformed)
	}
	return l, nil
}

// readKV parses a flat-keyed file ("key value" per line) and calls f for
// each pair.
func (r *Reader) readKV(fd int, dir string, name cname, f func(k []byte, v uint64)) error {
	data, err := r.fetch(fd, dir, name)
	if err != nil {
		return err
	}
	if err := ParseFlatKeyed(data, f); err != nil {
		return fmt.Errorf("%s/%s: %w", dir, name.s, err)
	}
	return nil
}

// field is where readFields stores the value of one key.
type field struct {
	key string
	dst *uint64
}

// readFields reads the flat-keyed file name and stores the value of each
// key of fields in its dst; keys not in fields are skipped, since the
// kernel adds keys over time.
func (r *Reader) readFields(fd int, dir string, name cname, fields []field) error {
	return r.readKV(fd, dir, name, func(k []byte, v uint64) {
		for _, f := range fields {
			if f.key == string(k) {
				*f.dst = v
				return
			}
		}
	})
}

// ParseFlatKeyed parses a cgroup v2 flat-keyed file ("KEY VALUE\n" lines, as
// memory.stat, memory.events, cpu.stat) and calls f for each pair. A line
// that does not have exactly that shape is an error wrapping ErrMalformed.
func ParseFlatKeyed(data []byte, f func(k []byte, v uint64)) error {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		if len(line) == 0 {
			continue
		}
		k, vb, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(k) == 0 || len(vb) == 0 || digits(vb) != len(vb) {
			return fmt.Errorf("line %q: %w", clip(line), ErrMalformed)
		}
		v, ok := atou(vb)
		if !ok {
			return fmt.Errorf("line %q: value overflows: %w", clip(line), ErrMalformed)
		}
		f(k, v)
	}
	return nil
}

// parseUintLine parses a single-value file: decimal digits, without the
// leading zeros the kernel never prints, and a newline.
func parseUintLine(data []byte) (uint64, bool) {
	data = bytes.TrimSuffix(data, []byte{'\n'})
	if len(data) == 0 || digits(data) != len(data) || (len(data) > 1 && data[0] == '0') {
		return 0, false
	}
	return atou(data)
}

// ParseLimit parses a limit file such as memory.max or pids.max: "max" or a
// decimal number, followed by a newline.
func ParseLimit(data []byte) (Limit, bool) {
	if string(bytes.TrimSuffix(data, []byte{'\n'})) == "max" {
		return Limit{Unlimited: true}, true
	}
	v, ok := parseUintLine(data)
	return Limit{Value: v}, ok
}
