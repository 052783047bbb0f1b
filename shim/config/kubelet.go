package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeshim/nodeshim/eviction"
)

// KubeletDefaultEvictionHard is kubelet's default evictionHard on Linux
// (pkg/kubelet/apis/config/v1beta1/defaults_linux.go).
func KubeletDefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// ReadKubeletConfig reads the kubelet's configuration file and the drop-ins
// of its --config-dir (dir, optional) with kubelet's merge rules: each
// document decoded strictly, then applied in order as a JSON merge patch.
// Paths are as the caller sees them (under the host root in a pod).
func ReadKubeletConfig(file, dir string) (*kubeletv1beta1.KubeletConfiguration, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read kubelet config: %w", err)
	}
	// kubelet refuses an empty configuration file ("Object 'Kind' is
	// missing"); read as its defaults, it would hide a truncated write.
	if empty, err := isEmptyDocument(data); err == nil && empty {
		return nil, fmt.Errorf("kubelet config %s: %w", file, ErrEmptyKubeletConfig)
	}
	files := []File{{Name: file, Data: data}}
	if dir != "" {
		dropins, err := ReadDropins(dir)
		if err != nil {
			return nil, fmt.Errorf("read kubelet config dir: %w", err)
		}
		files = append(files, dropins...)
	}
	kc, err := Merge(kubeletv1beta1.KubeletConfiguration{}, files...)
	if err != nil {
		return nil, fmt.Errorf("kubelet config %s: %w", file, err)
	}
	if kc.Kind != "" && kc.Kind != "KubeletConfiguration" {
		return nil, fmt.Errorf("kubelet config %s: kind %q, want KubeletConfiguration", file, kc.Kind)
	}
	return &kc, nil
}

// ErrEmptyKubeletConfig is returned, wrapped with the file's name, for a
// kubelet configuration file that is empty or holds only comments.
var ErrEmptyKubeletConfig = errors.New("empty file (only whitespace or comments): kubelet refuses it too")

// KubeletEvictionHard is the evictionHard the kubelet of kc enforces: its
// own map when set (merged over the defaults only with
// mergeDefaultEvictionSettings, else the signals it omits are disabled, as
// kubelet does), the defaults when it sets none.
func KubeletEvictionHard(kc *kubeletv1beta1.KubeletConfiguration) map[string]string {
	if kc == nil || len(kc.EvictionHard) == 0 {
		return KubeletDefaultEvictionHard()
	}
	out := map[string]string{}
	if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		out = KubeletDefaultEvictionHard()
	}
	maps.Copy(out, kc.EvictionHard)
	return out
}

// EvictionString renders an evictionHard map in --eviction-hard syntax,
// signals in name order, for eviction.ParseThresholds.
func EvictionString(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"<"+m[k])
	}
	return strings.Join(parts, ",")
}

// NodeSettings are the settings nodeshim takes from its own configuration
// or, where that is silent, from the node's kubelet.
type NodeSettings struct {
	// Thresholds are the eviction thresholds of the pressure conditions.
	Thresholds []eviction.Threshold
	// ThresholdsFrom says where they came from: "nodeshim config",
	// "kubelet config FILE" or "kubelet defaults".
	ThresholdsFrom string
	// SeccompDefault is the kubelet's seccompDefault (RuntimeDefault for
	// pods that name no profile); false without a kubelet config.
	SeccompDefault bool
	// ContainerRuntimeEndpoint is the CRI socket: nodeshim's own setting,
	// else the kubelet's.
	ContainerRuntimeEndpoint string
}

// NodeSettings resolves c's node settings, reading the kubelet's
// configuration under hostRoot when c names one. An unreadable or invalid
// kubelet configuration is an error naming the file.
func (c *ShimConfiguration) NodeSettings(hostRoot string) (NodeSettings, error) {
	s := NodeSettings{ContainerRuntimeEndpoint: c.ContainerRuntimeEndpoint}
	hard, from := KubeletDefaultEvictionHard(), "kubelet defaults"
	if c.Kubelet.ConfigFile != "" {
		dir := ""
		if c.Kubelet.ConfigDir != "" {
			dir = hostPath(hostRoot, c.Kubelet.ConfigDir)
		}
		kc, err := ReadKubeletConfig(hostPath(hostRoot, c.Kubelet.ConfigFile), dir)
		if err != nil {
			return NodeSettings{}, err
		}
		hard, from = KubeletEvictionHard(kc), "kubelet config "+c.Kubelet.ConfigFile
		s.SeccompDefault = kc.SeccompDefault != nil && *kc.SeccompDefault
		if s.ContainerRuntimeEndpoint == "" {
			s.ContainerRuntimeEndpoint = kc.ContainerRuntimeEndpoint
		}
	}
	if len(c.Pressure.EvictionHard) > 0 {
		hard, from = c.Pressure.EvictionHard, "nodeshim config"
	}
	ths, err := eviction.ParseThresholds(EvictionString(hard))
	if err != nil {
		return NodeSettings{}, fmt.Errorf("eviction thresholds from %s: %w", from, err)
	}
	s.Thresholds, s.ThresholdsFrom = ths, from
	return s, nil
}

func hostPath(hostRoot, p string) string {
	if hostRoot == "" || hostRoot == "/" {
		return p
	}
	return strings.TrimSuffix(hostRoot, "/") + p
}
