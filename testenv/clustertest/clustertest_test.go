package clustertest

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKubeletConfig: the KubeletConfiguration is valid YAML and carries
// what this kind of machine needs (see the package doc).
func TestKubeletConfig(t *testing.T) {
	k := kubelet{address: "127.0.0.1", port: 10250, endpoint: "/tmp/nsrt-0/containerd.sock", cgroupRoot: "/nsrt-0/kubelet", podLogsDir: "/tmp/nsct-x/pod-logs"}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(kubeletConfig(k)), &cfg); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"kind":                   "KubeletConfiguration",
		"address":                "127.0.0.1",
		"port":                   float64(10250),
		"cgroupDriver":           "cgroupfs",
		"cgroupRoot":             "/nsrt-0/kubelet",
		"failSwapOn":             false,
		"failCgroupV1":           false,
		"maxOpenFiles":           float64(20000),
		"makeIPTablesUtilChains": false,
		"oomScoreAdj":            float64(0),
		"podLogsDir":             "/tmp/nsct-x/pod-logs",
	} {
		if got := cfg[key]; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	if ep, _ := cfg["containerRuntimeEndpoint"].(string); ep != "unix:///tmp/nsrt-0/containerd.sock" {
		t.Errorf("containerRuntimeEndpoint = %q, want containerd's socket", ep)
	}
}
