package criu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrNoCachedCheck is wrapped when a CheckCache holds no usable record
// for a binary: none written yet, another boot, or another criu.
var ErrNoCachedCheck = errdefs.New(errdefs.ErrNotFound, "no cached criu check")

// Readiness is what CRIU's own checks say of this node: whether `criu
// check` passed and, for each of ProbedFeatures, whether `criu check
// --feature` did. It is the part of the capability report that a restore
// compares a checkpoint against.
type Readiness struct {
	// Binary is the criu the answers are of.
	Binary Binary
	// Version is its version.
	Version Version
	// CheckErr is nil when `criu check` passed, else it wraps
	// ErrCheckFailed with CRIU's message.
	CheckErr error
	// Features holds, for each probed feature, nil when it passed or an
	// error wrapping ErrCheckFailed with CRIU's message. A feature that
	// is not a key was not asked.
	Features map[string]error
	// CachedAt is when the answers were made, if they came from a
	// CheckCache; zero when criu ran for them.
	CachedAt time.Time
}

// Feature returns whether the feature name passed, with CRIU's reason
// when it did not; known is false when it was not asked.
func (r Readiness) Feature(name string) (err error, known bool) {
	err, known = r.Features[name]
	return err, known
}

// probedNames are the names of ProbedFeatures.
func probedNames() []string {
	names := make([]string, len(ProbedFeatures))
	for i, f := range ProbedFeatures {
		names[i] = f.Name
	}
	return names
}

// readinessOf is the Readiness of one probe's results.
func readinessOf(bin Binary, r checkResults) Readiness {
	out := Readiness{Binary: bin, Version: r.version, CheckErr: r.checkErr, Features: make(map[string]error, len(r.features)), CachedAt: r.cachedAt}
	for name, err := range r.features {
		out.Features[name] = err
	}
	return out
}

// Readiness returns what the cache holds for bin in this boot, without
// running criu: an error wrapping ErrNoCachedCheck when it holds nothing
// usable (no record, another boot, another binary), or another error when
// the record or the boot id cannot be read.
func (c CheckCache) Readiness(bin Binary) (Readiness, error) {
	r, err := c.load(bin, probedNames())
	if errors.Is(err, errCacheMiss) {
		return Readiness{}, fmt.Errorf("%w: %w", ErrNoCachedCheck, err)
	}
	if err != nil {
		return Readiness{}, err
	}
	return readinessOf(bin, r), nil
}

// CheckReadiness answers Readiness for bin the way the capability report
// does: from cache when it has this boot's answers for bin, else by
// running `criu --version`, `criu check` and the feature checks of
// ProbedFeatures (about a second), whose definitive answers it then keeps
// in cache (nil: none kept). An error means criu could not be asked at
// all (not run, timed out); a check that ran and failed is in the
// Readiness.
func CheckReadiness(ctx context.Context, bin Binary, cache *CheckCache) (Readiness, error) {
	if cache != nil {
		if r, err := cache.Readiness(bin); err == nil {
			return r, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	checkFirst, start, stop, _ := kerndatRun(KerndatDir, time.Now())
	r := runChecks(ctx, bin, start, probedNames(), checkFirst)
	stop()
	if r.verErr != nil {
		return Readiness{}, fmt.Errorf("ask %s its version: %w", bin.Path, r.verErr)
	}
	if r.checkErr != nil && !errors.Is(r.checkErr, ErrCheckFailed) {
		return Readiness{}, fmt.Errorf("run %s check: %w", bin.Path, r.checkErr)
	}
	if cache != nil {
		// A cache that cannot be written costs the next caller a second;
		// the answers stand.
		_, _ = cache.store(bin, r, time.Now())
	}
	return readinessOf(bin, r), nil
}
