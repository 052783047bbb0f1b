package eviction

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Threshold is an eviction-style threshold: the signal is crossed when its
// available amount falls below Quantity, or below Percentage of its capacity.
type Threshold struct {
	Signal Signal
	// Quantity is set for absolute thresholds ("100Mi").
	Quantity *resource.Quantity
	// Percentage is set (0 < p <= 1) for relative thresholds ("10%").
	Percentage float64
}

// DefaultHardThresholds is kubelet's default --eviction-hard on Linux
// (pkg/kubelet/eviction/defaults_linux.go): memory.available<100Mi,
// nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%,
// imagefs.inodesFree<5%. kubelet sets no pid.available default.
const DefaultHardThresholds = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%"

// ErrThreshold is wrapped by every error ParseThresholds returns; it is of
// class errdefs.ErrInvalidArgument.
var ErrThreshold = errdefs.New(errdefs.ErrInvalidArgument, "invalid eviction threshold")

// ParseThresholds parses thresholds in kubelet's --eviction-hard syntax: a
// comma-separated list of SIGNAL<QUANTITY or SIGNAL<PERCENT%. A threshold of
// 0 or 0% disables its signal, as in kubelet. Unknown signals, operators
// other than "<", negative quantities, percentages over 100 and repeated
// signals are errors.
func ParseThresholds(s string) ([]Threshold, error) {
	var out []Threshold
	seen := map[Signal]bool{}
	for _, stmt := range strings.Split(s, ",") {
		stmt = strings.TrimSpace(stmt)
		if stmt == "" {
			continue
		}
		sig, val, ok := strings.Cut(stmt, "<")
		if !ok {
			return nil, fmt.Errorf("%w %q: want SIGNAL<VALUE", ErrThreshold, stmt)
		}
		sig, val = strings.TrimSpace(sig), strings.TrimSpace(val)
		if strings.ContainsAny(sig, "<>=") || strings.ContainsAny(val, "<>=") {
			return nil, fmt.Errorf("%w %q: only the \"<\" operator is supported", ErrThreshold, stmt)
		}
		signal := Signal(sig)
		if !knownSignal(signal) {
			return nil, fmt.Errorf("%w %q: unknown signal %q (known: %s)", ErrThreshold, stmt, sig, signalList())
		}
		if seen[signal] {
			return nil, fmt.Errorf("%w %q: signal %s given twice", ErrThreshold, stmt, sig)
		}
		seen[signal] = true
		t := Threshold{Signal: signal}
		if p, isPct := strings.CutSuffix(val, "%"); isPct {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("%w %q: bad percentage %q", ErrThreshold, stmt, val)
			}
			if f < 0 || f > 100 {
				return nil, fmt.Errorf("%w %q: percentage %q must be within 0%%-100%%", ErrThreshold, stmt, val)
			}
			if f == 0 {
				continue
			}
			t.Percentage = f / 100
		} else {
			q, err := resource.ParseQuantity(val)
			if err != nil {
				return nil, fmt.Errorf("%w %q: %w", ErrThreshold, stmt, err)
			}
			if q.Sign() < 0 {
				return nil, fmt.Errorf("%w %q: quantity must not be negative", ErrThreshold, stmt)
			}
			if q.IsZero() {
				continue
			}
			t.Quantity = &q
		}
		out = append(out, t)
	}
	return out, nil
}

// MustDefaultThresholds returns the parsed DefaultHardThresholds.
func MustDefaultThresholds() []Threshold {
	t, err := ParseThresholds(DefaultHardThresholds)
	if err != nil {
		panic(err)
	}
	return t
}

// Limit returns the available amount under which the threshold is crossed
// for a given capacity.
func (t Threshold) Limit(capacity uint64) uint64 {
	if t.Quantity != nil {
		v := t.Quantity.Value()
		if v < 0 {
			return 0
		}
		return uint64(v)
	}
	return uint64(math.Ceil(t.Percentage * float64(capacity)))
}

// Crossed reports whether a known observation is under the threshold.
func (t Threshold) Crossed(o cgroup.Observation) bool {
	return o.Known() && o.Available < t.Limit(o.Capacity)
}

// String prints t in kubelet's syntax.
func (t Threshold) String() string {
	if t.Quantity != nil {
		return string(t.Signal) + "<" + t.Quantity.String()
	}
	return string(t.Signal) + "<" + strconv.FormatFloat(t.Percentage*100, 'f', -1, 64) + "%"
}

func knownSignal(s Signal) bool {
	for _, k := range Signals {
		if k == s {
			return true
		}
	}
	return false
}

func signalList() string {
	s := make([]string, len(Signals))
	for i, k := range Signals {
		s[i] = string(k)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}
