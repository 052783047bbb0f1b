package capability

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
)

// BootCacheFile is the name of the file in which a BootCache keeps its
// verdicts.
const BootCacheFile = "verdicts.json"

// BootCache keeps the findings of requirements marked PerBoot between runs
// of nodeshim, so that the second report of a boot does not load and
// verify the same eBPF programs again (70-130 ms of a report here).
//
// A record is used only when its key matches: the kernel's boot id, the
// digest of the running binary (which carries the probes and the programs
// they load) and the effective identity of the process (euid and
// capabilities: a probe refused to an unprivileged process must not answer
// for root), and the Scope the caller gives. A reboot, a kernel update or another nodeshim therefore probes
// again; a record that cannot be read or parsed is ignored and replaced.
// What the key cannot see is a change of kernel settings within one boot
// (a sysctl, an LSM policy loaded later); the evidence of a cached finding
// says that it is cached and when it was probed, and `nodeshim report
// --cache-dir ""` probes everything afresh. Only definitive verdicts
// (Supported, Degraded, Unsupported) are kept, never Unknown.
//
// A BootCache is safe for concurrent use by the probes it wraps.
type BootCache struct {
	// Dir holds BootCacheFile; it is created (mode 0700) by Save.
	Dir string
	// BootIDPath is the kernel's boot id, normally
	// /proc/sys/kernel/random/boot_id.
	BootIDPath string
	// Binary identifies the running binary; empty means ExecutableDigest().
	Binary string
	// Scope is part of the key: what else the findings depend on, such as
	// the roots of the host a probe reads (a report on a recorded host
	// must not share findings with one on the live host).
	Scope string
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	once   sync.Once
	mu     sync.Mutex
	key    bootKey
	keyErr error
	loaded map[string]cachedFinding
	found  map[string]cachedFinding
}

// bootKey is what a record must match to be used.
type bootKey struct {
	BootID   string `json:"bootID"`
	Binary   string `json:"binary"`
	Identity string `json:"identity"`
	Scope    string `json:"scope,omitempty"`
}

// cachedFinding is one finding in the cache with the time it was probed.
type cachedFinding struct {
	Finding
	ProbedAt time.Time `json:"probedAt"`
}

// bootRecord is the JSON form of the cache file.
type bootRecord struct {
	Key      bootKey                  `json:"key"`
	Findings map[string]cachedFinding `json:"findings"`
}

// Wrap returns reqs with the probe of every PerBoot requirement answered
// from the cache when it holds a finding for this boot, binary and
// identity, and recorded for Save otherwise. Other requirements are
// returned as they are. A nil cache returns reqs unchanged.
func (c *BootCache) Wrap(reqs []Requirement) []Requirement {
	if c == nil {
		return reqs
	}
	out := make([]Requirement, len(reqs))
	for i, r := range reqs {
		out[i] = r
		if r.PerBoot && r.Probe != nil {
			out[i].Probe = c.probe(r.ID, r.Probe)
		}
	}
	return out
}

// probe wraps one PerBoot probe.
func (c *BootCache) probe(id string, live func(context.Context, Host) Finding) func(context.Context, Host) Finding {
	return func(ctx context.Context, h Host) Finding {
		c.once.Do(c.load)
		c.mu.Lock()
		cf, ok := c.loaded[id]
		c.mu.Unlock()
		if ok {
			f := cf.Finding
			f.Evidence += fmt.Sprintf(" (cached: probed at %s in this boot by this binary)", cf.ProbedAt.UTC().Format(time.RFC3339))
			return f
		}
		f := live(ctx, h)
		if f.Verdict == Supported || f.Verdict == Degraded || f.Verdict == Unsupported {
			c.mu.Lock()
			if c.found == nil {
				c.found = map[string]cachedFinding{}
			}
			c.found[id] = cachedFinding{Finding: f, ProbedAt: c.now()}
			c.mu.Unlock()
		}
		return f
	}
}

func (c *BootCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// load reads the key of this process and the record, if it matches.
func (c *BootCache) load() {
	c.key, c.keyErr = c.currentKey()
	if c.keyErr != nil {
		return
	}
	rec, err := c.read()
	if err != nil || rec.Key != c.key {
		return
	}
	c.loaded = map[string]cachedFinding{}
	for id, cf := range rec.Findings {
		switch {
		case cf.Verdict != Supported && cf.Verdict != Degraded && cf.Verdict != Unsupported,
			cf.Evidence == "", cf.ProbedAt.IsZero():
			continue
		}
		c.loaded[id] = cf
	}
}

// read returns the record in Dir.
func (c *BootCache) read() (bootRecord, error) {
	p := filepath.Join(c.Dir, BootCacheFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return bootRecord{}, fmt.Errorf("read verdict cache: %w", err)
	}
	var rec bootRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return bootRecord{}, fmt.Errorf("parse verdict cache %s: %w", p, err)
	}
	return rec, nil
}

// currentKey returns the key of this boot, binary and process.
func (c *BootCache) currentKey() (bootKey, error) {
	b, err := os.ReadFile(c.BootIDPath)
	if err != nil {
		return bootKey{}, fmt.Errorf("read boot id: %w", err)
	}
	k := bootKey{BootID: strings.TrimSpace(string(b)), Binary: c.Binary, Scope: c.Scope}
	if k.BootID == "" {
		return bootKey{}, fmt.Errorf("read boot id: %s is empty", c.BootIDPath)
	}
	if k.Binary == "" {
		if k.Binary, err = ExecutableDigest(); err != nil {
			return bootKey{}, err
		}
	}
	if k.Identity, err = processIdentity(); err != nil {
		return bootKey{}, err
	}
	return k, nil
}

// Save writes the findings probed in this run, with those still valid
// from the cache, if any probe answered afresh. It reports whether it
// wrote. Without a key (no boot id, no binary digest) it writes nothing.
func (c *BootCache) Save() (bool, error) {
	if c == nil {
		return false, nil
	}
	c.once.Do(c.load)
	if c.keyErr != nil {
		return false, fmt.Errorf("verdict cache: %w", c.keyErr)
	}
	c.mu.Lock()
	rec := bootRecord{Key: c.key, Findings: map[string]cachedFinding{}}
	for id, f := range c.loaded {
		rec.Findings[id] = f
	}
	for id, f := range c.found {
		rec.Findings[id] = f
	}
	fresh := len(c.found)
	c.mu.Unlock()
	if fresh == 0 {
		return false, nil
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return false, fmt.Errorf("encode verdict cache: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return false, fmt.Errorf("create verdict cache dir: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(c.Dir, BootCacheFile), append(b, '\n'), 0o600); err != nil {
		return false, fmt.Errorf("write verdict cache: %w", err)
	}
	return true, nil
}

// ExecutableDigest identifies the running binary without reading all of
// it: the Go build ID from its ELF note (the linker's hash of the binary's
// content), with the file's size, inode and modification and change times,
// so that a replaced binary never matches and a binary built without a
// build ID is still told apart by its file.
func ExecutableDigest() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the running binary: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("open the running binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", exe, err)
	}
	id := fmt.Sprintf("size=%d mtime=%d", fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id += fmt.Sprintf(" dev=%d ino=%d ctime=%d.%09d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
	}
	if ef, err := elf.NewFile(f); err == nil {
		if s := ef.Section(".note.go.buildid"); s != nil {
			if note, err := s.Data(); err == nil {
				if bid := goBuildID(note); bid != "" {
					id = "go-build-id=" + bid + " " + id
				}
			}
		}
	}
	return id, nil
}

// goBuildID returns the Go build ID in the content of a .note.go.buildid
// section (an ELF note named "Go" of type 4), or "".
func goBuildID(note []byte) string {
	const hdr = 12
	if len(note) < hdr+4 {
		return ""
	}
	le := func(b []byte) int { return int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24 }
	namesz, descsz, typ := le(note[0:]), le(note[4:]), le(note[8:])
	nameEnd := hdr + (namesz+3)&^3
	if typ != 4 || namesz != 4 || !bytes.Equal(note[hdr:hdr+3], []byte("Go\x00")) || nameEnd+descsz > len(note) || descsz <= 0 {
		return ""
	}
	return string(note[nameEnd : nameEnd+descsz])
}

// processIdentity is the euid and the effective capability set of this
// process, on which probes that need privilege depend.
func processIdentity() (string, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", fmt.Errorf("read process identity: %w", err)
	}
	capEff := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			capEff = strings.TrimSpace(v)
			break
		}
	}
	if capEff == "" {
		return "", errors.New("read process identity: /proc/self/status has no CapEff")
	}
	return fmt.Sprintf("euid=%d capeff=%s", os.Geteuid(), capEff), nil
}
