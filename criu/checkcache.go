package criu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
)

// CheckCacheFile is the name of the file in which a CheckCache keeps the
// last results of `criu check`.
const CheckCacheFile = "criu-check.json"

// CheckCache keeps the results of `criu --version`, `criu check` and the
// `criu check --feature` runs of the capability report between runs of
// nodeshim. Those runs fork CRIU seven times and take about a second,
// while their answer depends only on the running kernel and the criu
// binary: a record is used only when the boot id and the binary's identity
// (path, size, modification and change time, inode) are those it was made
// with. A reboot, a kernel update or a new criu therefore runs the checks
// again. What it cannot see is a change behind a wrapper script (a new
// library under its private loader) or a change of kernel settings within
// one boot; the report says that a result is cached, and when it was made.
type CheckCache struct {
	// Dir holds CheckCacheFile; it is created (mode 0700) on first write.
	Dir string
	// BootIDPath is the kernel's boot id, normally
	// /proc/sys/kernel/random/boot_id.
	BootIDPath string
}

// binaryIdentity tells one criu executable from another without reading
// it: a package upgrade replaces the file (new inode, new times).
type binaryIdentity struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"modTimeNs"`
	ChTime  int64  `json:"changeTimeNs,omitempty"`
	Inode   uint64 `json:"inode,omitempty"`
	Device  uint64 `json:"device,omitempty"`
}

// checkRecord is the JSON form of one cached set of results.
type checkRecord struct {
	BootID    string             `json:"bootID"`
	Binary    binaryIdentity     `json:"binary"`
	CheckedAt time.Time          `json:"checkedAt"`
	Version   Version            `json:"version"`
	Check     outcome            `json:"check"`
	Features  map[string]outcome `json:"features"`
}

// outcome is a definitive answer of criu: it passed (with its last line
// in Message) or it failed (with CRIU's own error lines in Message).
type outcome struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

// checkResults are what one full run of the CRIU probes found.
type checkResults struct {
	version  Version
	verErr   error
	checkMsg string
	checkErr error
	features map[string]error
	// cachedAt is when the results were made, if they come from the cache.
	cachedAt time.Time
}

// key returns the boot id and the identity of bin, the key of a record.
func (c CheckCache) key(bin Binary) (string, binaryIdentity, error) {
	b, err := os.ReadFile(c.BootIDPath)
	if err != nil {
		return "", binaryIdentity{}, fmt.Errorf("read boot id: %w", err)
	}
	boot := strings.TrimSpace(string(b))
	if boot == "" {
		return "", binaryIdentity{}, fmt.Errorf("read boot id: %s is empty", c.BootIDPath)
	}
	fi, err := os.Stat(bin.Path)
	if err != nil {
		return "", binaryIdentity{}, fmt.Errorf("stat criu binary: %w", err)
	}
	id := binaryIdentity{Path: bin.Path, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}
	fillIdentity(&id, fi)
	return boot, id, nil
}

// errCacheMiss is returned by load when there is no usable record.
var errCacheMiss = errors.New("no cached criu check for this boot and binary")

// load returns the cached results for bin, or an error wrapping
// errCacheMiss when there is none for this boot and binary (or another
// error when the record cannot be read).
func (c CheckCache) load(bin Binary, features []string) (checkResults, error) {
	boot, id, err := c.key(bin)
	if err != nil {
		return checkResults{}, err
	}
	p := filepath.Join(c.Dir, CheckCacheFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return checkResults{}, fmt.Errorf("%w: %s does not exist", errCacheMiss, p)
	}
	if err != nil {
		return checkResults{}, fmt.Errorf("read %s: %w", p, err)
	}
	var rec checkRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return checkResults{}, fmt.Errorf("%w: parse %s: %v", errCacheMiss, p, err)
	}
	switch {
	case rec.BootID != boot:
		return checkResults{}, fmt.Errorf("%w: %s is from boot %s, this is %s", errCacheMiss, p, rec.BootID, boot)
	case rec.Binary != id:
		return checkResults{}, fmt.Errorf("%w: %s is for criu %+v, found %+v", errCacheMiss, p, rec.Binary, id)
	case rec.CheckedAt.IsZero():
		return checkResults{}, fmt.Errorf("%w: %s has no time", errCacheMiss, p)
	}
	r := checkResults{version: rec.Version, cachedAt: rec.CheckedAt, features: map[string]error{}}
	if rec.Check.OK {
		r.checkMsg = rec.Check.Message
	} else {
		r.checkErr = fmt.Errorf("%s check: %w: %s", bin.Path, ErrCheckFailed, rec.Check.Message)
	}
	for _, name := range features {
		o, ok := rec.Features[name]
		if !ok {
			return checkResults{}, fmt.Errorf("%w: %s has no result for feature %s", errCacheMiss, p, name)
		}
		if !o.OK {
			r.features[name] = fmt.Errorf("criu check --feature %s: %w: %s", name, ErrCheckFailed, o.Message)
		}
	}
	return r, nil
}

// store writes r as the record for bin, if every answer in it is
// definitive (criu ran and passed or failed; no timeout, no exec error).
// It reports whether it wrote.
func (c CheckCache) store(bin Binary, r checkResults, now time.Time) (bool, error) {
	if r.verErr != nil || (r.checkErr != nil && !errors.Is(r.checkErr, ErrCheckFailed)) {
		return false, nil
	}
	rec := checkRecord{Version: r.version, CheckedAt: now.UTC(), Features: map[string]outcome{}}
	var err error
	if rec.BootID, rec.Binary, err = c.key(bin); err != nil {
		return false, err
	}
	rec.Check = outcome{OK: r.checkErr == nil, Message: r.checkMsg}
	if r.checkErr != nil {
		rec.Check.Message = failureMessage(r.checkErr)
	}
	for name, ferr := range r.features {
		if ferr != nil && !errors.Is(ferr, ErrCheckFailed) {
			return false, nil
		}
		o := outcome{OK: ferr == nil}
		if ferr != nil {
			o.Message = failureMessage(ferr)
		}
		rec.Features[name] = o
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return false, fmt.Errorf("encode criu check cache: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return false, fmt.Errorf("create criu check cache dir: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(c.Dir, CheckCacheFile), append(b, '\n'), 0o600); err != nil {
		return false, fmt.Errorf("write criu check cache: %w", err)
	}
	return true, nil
}

// failureMessage is CRIU's own message in an error wrapping
// ErrCheckFailed: the text after "criu check failed: ".
func failureMessage(err error) string {
	s := err.Error()
	marker := ErrCheckFailed.Error() + ": "
	if i := strings.Index(s, marker); i >= 0 {
		return s[i+len(marker):]
	}
	return s
}
