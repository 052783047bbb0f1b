package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubeletLike carries the KubeletConfiguration fields used by the examples
// of the kubelet documentation page "Kubelet Configuration Directory
// Merging", so that Merge is checked against kubelet's documented results.
type kubeletLike struct {
	metav1.TypeMeta     `json:",inline"`
	Port                int32               `json:"port,omitempty"`
	Address             string              `json:"address,omitempty"`
	SerializeImagePulls *bool               `json:"serializeImagePulls,omitempty"`
	Authorization       *kubeletAuthz       `json:"authorization,omitempty"`
	ClusterDNS          []string            `json:"clusterDNS,omitempty"`
	FeatureGates        map[string]bool     `json:"featureGates,omitempty"`
	StaticPodURLHeader  map[string][]string `json:"staticPodURLHeader,omitempty"`
}

type kubeletAuthz struct {
	Mode    string `json:"mode,omitempty"`
	Webhook struct {
		CacheAuthorizedTTL   metav1.Duration `json:"cacheAuthorizedTTL,omitzero"`
		CacheUnauthorizedTTL metav1.Duration `json:"cacheUnauthorizedTTL,omitzero"`
	} `json:"webhook,omitzero"`
}

func TestMergeKubeletDocumentationExamples(t *testing.T) {
	tests := []struct {
		name                 string
		base, dropin, result string
	}{
		{
			name: "structure fields: port, authorization, address",
			base: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: "5m"
    cacheUnauthorizedTTL: "30s"
serializeImagePulls: false
address: "192.168.0.1"
`,
			dropin: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authorization:
  mode: AlwaysAllow
  webhook:
    cacheAuthorizedTTL: "8m"
    cacheUnauthorizedTTL: "45s"
address: "192.168.0.8"
`,
			result: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
authorization:
  mode: AlwaysAllow
  webhook:
    cacheAuthorizedTTL: "8m"
    cacheUnauthorizedTTL: "45s"
address: "192.168.0.8"
`,
		},
		{
			name: "lists: clusterDNS replaced whole",
			base: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
clusterDNS:
  - "192.168.0.9"
  - "192.168.0.8"
`,
			dropin: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
clusterDNS:
  - "192.168.0.2"
  - "192.168.0.3"
  - "192.168.0.5"
`,
			result: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
clusterDNS:
  - "192.168.0.2"
  - "192.168.0.3"
  - "192.168.0.5"
`,
		},
		{
			name: "maps: featureGates per key, staticPodURLHeader lists per key",
			base: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
featureGates:
  AllAlpha: false
  MemoryQoS: true
staticPodURLHeader:
  kubelet-api-support:
  - "Authorization: 234APSDFA"
  - "X-Custom-Header: 123"
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 456"
`,
			dropin: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
featureGates:
  MemoryQoS: false
  KubeletTracing: true
  DynamicResourceAllocation: true
staticPodURLHeader:
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 345"
`,
			result: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
featureGates:
  AllAlpha: false
  MemoryQoS: false
  KubeletTracing: true
  DynamicResourceAllocation: true
staticPodURLHeader:
  kubelet-api-support:
  - "Authorization: 234APSDFA"
  - "X-Custom-Header: 123"
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 345"
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var base kubeletLike
			if err := yaml.UnmarshalStrict([]byte(tt.base), &base); err != nil {
				t.Fatal(err)
			}
			var before kubeletLike
			if err := yaml.UnmarshalStrict([]byte(tt.base), &before); err != nil {
				t.Fatal(err)
			}
			var want kubeletLike
			if err := yaml.UnmarshalStrict([]byte(tt.result), &want); err != nil {
				t.Fatal(err)
			}
			got, err := Merge(base, File{Name: "10-dropin.conf", Data: []byte(tt.dropin)})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("merged =\n%s\nwant\n%s", mustYAML(t, got), mustYAML(t, want))
			}
			if !reflect.DeepEqual(base, before) {
				t.Errorf("base was modified by the merge:\n%s", mustYAML(t, base))
			}
			// Same result when the base is a file too.
			got2, err := Merge(kubeletLike{}, File{Name: "kubelet.yaml", Data: []byte(tt.base)}, File{Name: "10-dropin.conf", Data: []byte(tt.dropin)})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got2, want) {
				t.Errorf("merged from files =\n%s\nwant\n%s", mustYAML(t, got2), mustYAML(t, want))
			}
		})
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMergeRules(t *testing.T) {
	base := kubeletLike{Port: 1, FeatureGates: map[string]bool{"A": true}, ClusterDNS: []string{"1.1.1.1"}}
	tests := []struct {
		name    string
		files   []File
		want    kubeletLike
		wantErr string
	}{
		{
			name:  "empty drop-in is harmless",
			files: []File{{"00-empty.conf", nil}, {"01-blank.conf", []byte("\n# only a comment\n")}},
			want:  base,
		},
		{
			name: "later files win, in the given order",
			files: []File{
				{"10-a.conf", []byte("port: 10\nfeatureGates: {B: true}")},
				{"20-b.conf", []byte("port: 20\nfeatureGates: {A: false}")},
			},
			want: kubeletLike{Port: 20, FeatureGates: map[string]bool{"A": false, "B": true}, ClusterDNS: []string{"1.1.1.1"}},
		},
		{
			name:  "empty list replaces the list",
			files: []File{{"10.conf", []byte("clusterDNS: []")}},
			want:  kubeletLike{Port: 1, FeatureGates: map[string]bool{"A": true}, ClusterDNS: []string{}},
		},
		{
			name:    "unknown field names file and field",
			files:   []File{{"10-typo.conf", []byte("port: 2\nclusterDSN: [x]\n")}},
			wantErr: `10-typo.conf: error unmarshaling JSON: while decoding JSON: json: unknown field "clusterDSN"`,
		},
		{
			name:    "unknown nested field names file and field",
			files:   []File{{"10-nested.conf", []byte("authorization:\n  mode: x\n  webhok: {}\n")}},
			wantErr: `10-nested.conf: error unmarshaling JSON: while decoding JSON: json: unknown field "webhok"`,
		},
		{
			name:    "duplicate field",
			files:   []File{{"10-dup.conf", []byte("port: 2\nport: 3\n")}},
			wantErr: `10-dup.conf: error converting YAML to JSON: yaml: unmarshal errors:`,
		},
		{
			name:    "wrong type",
			files:   []File{{"10-type.conf", []byte("port: eighty\n")}},
			wantErr: `10-type.conf: error unmarshaling JSON`,
		},
		{
			name:    "not a mapping",
			files:   []File{{"10-list.conf", []byte("- a\n- b\n")}},
			wantErr: "10-list.conf:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Merge(base, tt.files...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Merge error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Merge = %+v, want %+v", got, tt.want)
			}
			if base.Port != 1 || !base.FeatureGates["A"] || len(base.FeatureGates) != 1 || len(base.ClusterDNS) != 1 {
				t.Errorf("base modified: %+v", base)
			}
		})
	}
}

func TestMergeNotObjectIsSentinel(t *testing.T) {
	_, err := Merge(kubeletLike{}, File{Name: "x.conf", Data: []byte(`"just a string"`)})
	if err == nil {
		t.Fatal("no error for a scalar document")
	}
	// A scalar fails the strict decode already; a JSON array reaches the mapping check.
	_, err = Merge[any](map[string]any{}, File{Name: "y.conf", Data: []byte(`[1, 2]`)})
	if !errors.Is(err, ErrNotObject) {
		t.Errorf("Merge of a list into a map = %v, want ErrNotObject", err)
	}
}

func TestReadDropinsOrder(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.conf", "B.conf", "a.conf", "10.conf", "9.conf", ".hidden.conf", "notes.txt", "a.conf.bak"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("port: 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := ReadDropins(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Name))
	}
	// Byte order: digits before upper case before lower case.
	want := []string{"10.conf", "9.conf", "B.conf", "a.conf", "b.conf"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("ReadDropins order = %v, want %v", names, want)
	}
	if files, err := ReadDropins(filepath.Join(dir, "missing")); err != nil || files != nil {
		t.Errorf("ReadDropins of a missing dir = %v, %v", files, err)
	}
}

// TestReadKubeletConfigEmpty: an empty kubelet configuration file is an
// error naming it (kubelet refuses it too), not kubelet's defaults.
func TestReadKubeletConfigEmpty(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "empty file"},
		{"comments", "# kubelet config\n", "empty file"},
		{"valid", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {memory.available: 1Gi}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(file, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			kc, err := ReadKubeletConfig(file, "")
			if tc.want == "" {
				if err != nil || kc.EvictionHard["memory.available"] != "1Gi" {
					t.Fatalf("ReadKubeletConfig = %+v, %v", kc, err)
				}
				return
			}
			if !errors.Is(err, ErrEmptyKubeletConfig) || !strings.Contains(err.Error(), file) {
				t.Fatalf("ReadKubeletConfig = %v, want %v naming %s", err, ErrEmptyKubeletConfig, file)
			}
		})
	}
}
