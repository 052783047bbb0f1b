package restore

import (
	"context"
	"path/filepath"

	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

// imageFeatures are the CRIU features (criu.ProbedFeatures names) that
// a checkpoint's images need from the node that restores them, by the
// prefix of the image that shows the need, except the image named skip:
// a task's own time namespace (timens-<id>.img) is restored only where
// CRIU can create one (Linux 5.6 with CONFIG_TIME_NS). CRIU writes
// timens-0.img at every dump on a kernel with time namespaces, the
// clocks of the root namespace, which a node without them restores
// without.
var imageFeatures = []struct{ prefix, skip, feature string }{
	{"timens-", "timens-0.img", "timens"},
}

// NeededFeatures returns the CRIU features the checkpoint whose members
// are entries needs on the restoring node, each with the first image
// that needs it.
func NeededFeatures(entries []archive.Entry) map[string]string {
	need := map[string]string{}
	for _, e := range entries {
		base, ok := strings.CutPrefix(e.Name, archive.ImagesDir+"/")
		if !ok || strings.Contains(base, "/") || !strings.HasSuffix(base, ".img") {
			continue
		}
		for _, f := range imageFeatures {
			if _, seen := need[f.feature]; !seen && strings.HasPrefix(base, f.prefix) && base != f.skip {
				need[f.feature] = e.Name
			}
		}
	}
	return need
}

// checkReadiness compares the checkpoint (its members, entries) with
// CRIU's own checks of this node, the capability report's readiness: a
// node whose `criu check` fails, or whose CRIU lacks a feature the
// checkpoint's images need, is refused before anything is unpacked.
// Readiness is asked to run CRIU only when the checkpoint needs a
// feature; otherwise only a cached answer is compared, and none means
// no comparison (CRIU's own error, if any, is passed on later).
func (r *Restore) checkReadiness(entries []archive.Entry) error {
	if r.Readiness == nil {
		return nil
	}
	need := NeededFeatures(entries)
	rd, err := r.Readiness(len(need) > 0)
	if err != nil {
		return nil
	}
	from := "CRIU's checks of this node"
	if !rd.CachedAt.IsZero() {
		from += " (cached " + rd.CachedAt.UTC().Format("2006-01-02T15:04:05Z") + ")"
	}
	if rd.CheckErr != nil {
		return fmt.Errorf("%w: %s say it cannot restore: %w", ErrRefused, from, rd.CheckErr)
	}
	names := make([]string, 0, len(need))
	for f := range need {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		ferr, known := rd.Feature(f)
		switch {
		case !known:
			continue
		case ferr != nil && errors.Is(ferr, criu.ErrCheckFailed):
			return fmt.Errorf("%w: %s needs CRIU feature %s, which %s say this node lacks: %w", ErrRefused, need[f], f, from, ferr)
		}
	}
	return nil
}

// ownCheckCache is the directory under the work directory where a
// restore keeps the CRIU checks it ran itself, for the rest of the boot.
const ownCheckCache = ".criu-check"

// bootIDPath is the kernel's boot id, which keys the check caches.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// NodeReadiness is CRIU's checks of this node for the CRIU that cfg
// restores with: nodeshim serve's per-boot report cache (cfg.ReportCache)
// when it holds this boot's answers for the same binary, else the
// restore's own cache under cfg.WorkDir, else, with run, CRIU's checks
// run now (about a second, once a boot) and kept there.
func NodeReadiness(cfg restoring.Config, run bool) (criu.Readiness, error) {
	bin, err := criu.Find(cfg.Criu, nil)
	if err != nil {
		return criu.Readiness{}, err
	}
	report := criu.CheckCache{Dir: cfg.ReportCache, BootIDPath: bootIDPath}
	if rd, err := report.Readiness(bin); err == nil {
		return rd, nil
	}
	own := &criu.CheckCache{Dir: filepath.Join(cfg.WorkDir, ownCheckCache), BootIDPath: bootIDPath}
	if !run {
		return own.Readiness(bin)
	}
	return criu.CheckReadiness(context.Background(), bin, own)
}
