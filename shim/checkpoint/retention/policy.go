// Package retention keeps a checkpoint directory: it decides which
// checkpoint archives to remove (Plan, a pure function over a listing of
// the directory) and removes them so that a crash in the middle leaves
// nothing half-deleted (Remove, Sweep): an archive is renamed into the
// directory's trash first, then unlinked, and the next start empties the
// trash. It lists the work entries of live checkpoints and those that
// killed ones left (Scan, judged by criu/workentry's Owners) with their
// sizes, and removes the left-over ones. It depends on nothing of
// nodeshim above it:
// callers convert their configuration into a Policy.
package retention

import (
	"cmp"
	"regexp"
	"slices"
	"time"
)

// DefaultMaxPerContainer is how many archives of one container are kept
// when the configuration does not say: the checkpoint-restore-operator's
// default for kubelet's archives.
const DefaultMaxPerContainer = 10

// Policy bounds the archives of a checkpoint directory. A zero limit is no
// limit.
type Policy struct {
	// MaxPerContainer is the number of archives kept per container.
	MaxPerContainer int
	// MaxBytes bounds the sum of the archives' sizes.
	MaxBytes int64
	// MaxAge removes archives older than this.
	MaxAge time.Duration
}

// The reasons of a removal, as logged and as the metric's label.
const (
	ReasonMaxAge          = "maxAge"
	ReasonMaxPerContainer = "maxPerContainer"
	ReasonMaxBytes        = "maxBytes"
)

// Archive is one checkpoint archive of a listing.
type Archive struct {
	// Name is the file name in the checkpoint directory.
	Name string `json:"name"`
	// Container groups the archives of one container: "<pod>_<namespace>-<container>"
	// as kubelet's archive name spells it.
	Container string `json:"container"`
	// Time is when the checkpoint was taken (the name's timestamp).
	Time time.Time `json:"time"`
	// Modified is the file's modification time: it orders archives of one
	// second, whose names' "-N" suffixes do not (a name freed by a
	// removal is taken again by the next checkpoint of that second).
	Modified time.Time `json:"-"`
	// Attempt is the name's "-N" suffix after the time (0 for none).
	Attempt int `json:"-"`
	// Size is the file's size in bytes.
	Size int64 `json:"sizeBytes"`
}

// archiveName matches kubelet's (and nodeshim's) archive names,
// checkpoint-<pod>_<namespace>-<container>-<RFC3339 UTC>[-N].tar. A pod
// name is a DNS subdomain and so never holds "_"; namespace and container
// hold "-", so the group key keeps them joined as the name does.
var archiveName = regexp.MustCompile(`^checkpoint-([^_/]+_.+)-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(?:-(\d+))?\.tar$`)

// ParseName returns the container key, time and attempt of an archive
// name, and false for a name that is not a checkpoint archive (work files,
// the trash, anything else in the directory).
func ParseName(name string) (container string, at time.Time, attempt int, ok bool) {
	m := archiveName.FindStringSubmatch(name)
	if m == nil {
		return "", time.Time{}, 0, false
	}
	at, err := time.Parse(time.RFC3339, m[2])
	if err != nil {
		return "", time.Time{}, 0, false
	}
	if m[3] != "" {
		for _, c := range m[3] {
			attempt = attempt*10 + int(c-'0')
			if attempt > 1<<20 {
				return "", time.Time{}, 0, false
			}
		}
	}
	return m[1], at, attempt, true
}

// Removal is an archive Plan removes, and why.
type Removal struct {
	Archive
	// Reason is ReasonMaxAge, ReasonMaxPerContainer or ReasonMaxBytes.
	Reason string `json:"reason"`
}

// older orders archives oldest first; the name breaks ties so that the
// order, and so the plan, never depends on the listing's order.
func older(a, b Archive) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	if c := a.Modified.Compare(b.Modified); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Attempt, b.Attempt); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Plan returns the archives of list that p removes at now, oldest first
// within each limit: first those older than MaxAge, then per container all
// but the newest MaxPerContainer, then the oldest until the rest, plus
// reserve bytes (an archive about to be written), fit in MaxBytes. An
// archive for which busy answers true (being written, restored or turned
// into an image) is never removed, but it still counts against the
// limits. It returns the removals and the bytes of the archives kept.
func Plan(p Policy, list []Archive, now time.Time, reserve int64, busy func(Archive) bool) (removals []Removal, kept int64) {
	if busy == nil {
		busy = func(Archive) bool { return false }
	}
	sorted := slices.Clone(list)
	slices.SortFunc(sorted, older)
	gone := make([]bool, len(sorted))
	remove := func(i int, reason string) {
		gone[i] = true
		removals = append(removals, Removal{Archive: sorted[i], Reason: reason})
	}
	if p.MaxAge > 0 {
		for i, a := range sorted {
			if now.Sub(a.Time) > p.MaxAge && !busy(a) {
				remove(i, ReasonMaxAge)
			}
		}
	}
	if p.MaxPerContainer > 0 {
		// Newest first: the first MaxPerContainer of a container stay; an
		// older busy one stays too, beyond the limit, until it is free.
		newer := map[string]int{}
		var over []int
		for i := len(sorted) - 1; i >= 0; i-- {
			a := sorted[i]
			if gone[i] {
				continue
			}
			if newer[a.Container] >= p.MaxPerContainer && !busy(a) {
				over = append(over, i)
			}
			newer[a.Container]++
		}
		slices.Reverse(over)
		for _, i := range over {
			remove(i, ReasonMaxPerContainer)
		}
	}
	for i, a := range sorted {
		if !gone[i] {
			kept += a.Size
		}
	}
	if p.MaxBytes > 0 {
		for i, a := range sorted {
			if kept+reserve <= p.MaxBytes {
				break
			}
			if gone[i] || busy(a) {
				continue
			}
			remove(i, ReasonMaxBytes)
			kept -= a.Size
		}
	}
	return removals, kept
}

// Summary is what the status document shows of one container's archives.
type Summary struct {
	// Container is the archives' container key (see Archive.Container).
	Container string `json:"container"`
	// Count and Bytes are the number and total size of its archives.
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
	// Oldest is the name of its oldest archive, OldestTime its time.
	Oldest     string    `json:"oldest"`
	OldestTime time.Time `json:"oldestTime"`
}

// Summarize returns one Summary per container of list, sorted by container.
func Summarize(list []Archive) []Summary {
	sorted := slices.Clone(list)
	slices.SortFunc(sorted, older)
	idx := map[string]int{}
	var out []Summary
	for _, a := range sorted {
		i, ok := idx[a.Container]
		if !ok {
			i = len(out)
			idx[a.Container] = i
			out = append(out, Summary{Container: a.Container, Oldest: a.Name, OldestTime: a.Time})
		}
		out[i].Count++
		out[i].Bytes += a.Size
	}
	slices.SortFunc(out, func(a, b Summary) int { return cmp.Compare(a.Container, b.Container) })
	return out
}
