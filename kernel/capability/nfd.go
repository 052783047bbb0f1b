package capability

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// NFDNamespace prefixes the features nodeshim hands to node-feature-
// discovery. NFD accepts subdomains of feature.node.kubernetes.io without
// extra configuration, so the features become node labels as they are.
const NFDNamespace = "nodeshim.feature.node.kubernetes.io"

// NFDMaxFileSize is the largest feature file NFD's local source reads
// (64 KiB); larger files are ignored by nfd-worker.
const NFDMaxFileSize = 64 << 10

// ErrNFDFeature is wrapped by NFDFeatures when a feature would not be a
// valid node label.
var ErrNFDFeature = errors.New("invalid NFD feature")

// NFDFeatures renders the report as a node-feature-discovery feature file
// (features.d format: "name=value" lines and # comments): the kernel
// version and cgroup mode, then one feature per requirement whose value is
// its verdict. It fails when a feature is not a valid label or when the
// file would exceed NFDMaxFileSize.
func (r *Report) NFDFeatures() ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s %s from nodeshim, generated %s\n", r.APIVersion, r.Kind, r.GeneratedAt.Format("2006-01-02T15:04:05Z07:00"))
	add := func(name, value string) error {
		// A label name (after the prefix) and a label value follow the
		// same rules: at most 63 characters, alphanumeric at both ends,
		// with '-', '_' and '.' between.
		if name == "" || len(validation.IsValidLabelValue(name)) > 0 || len(validation.IsValidLabelValue(value)) > 0 {
			return fmt.Errorf("%w: %s/%s=%s is not a valid node label", ErrNFDFeature, NFDNamespace, name, value)
		}
		fmt.Fprintf(&b, "%s/%s=%s\n", NFDNamespace, name, value)
		return nil
	}
	k := r.Kernel
	if k.Error == "" {
		for _, kv := range [][2]string{
			{"kernel.version.major", strconv.Itoa(k.Version.Major)},
			{"kernel.version.minor", strconv.Itoa(k.Version.Minor)},
			{"kernel.version.patch", strconv.Itoa(k.Version.Patch)},
		} {
			if err := add(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
	}
	if err := add("cgroup.mode", string(k.Cgroup.Mode)); err != nil {
		return nil, err
	}
	for _, res := range r.Requirements {
		if err := add(res.ID, string(res.Verdict)); err != nil {
			return nil, err
		}
	}
	if b.Len() > NFDMaxFileSize {
		return nil, fmt.Errorf("%w: feature file of %d bytes exceeds NFD's limit of %d", ErrNFDFeature, b.Len(), NFDMaxFileSize)
	}
	return []byte(b.String()), nil
}
