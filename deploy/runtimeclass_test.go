package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

// runtimeClassDir is the kustomize component that adds nodeshim's
// RuntimeClass.
const runtimeClassDir = "runtimeclass"

// TestRuntimeClassComponent decodes the component's files strictly and checks
// the RuntimeClass's handler and the init container that installs the
// handler's binaries: the image's nodeshim-runc in its install mode, into
// the host's /opt/nodeshim/bin, with no privilege.
func TestRuntimeClassComponent(t *testing.T) {
	read := func(name string, v any) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(runtimeClassDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var rc nodev1.RuntimeClass
	read("runtimeclass.yaml", &rc)
	if rc.APIVersion != "node.k8s.io/v1" || rc.Kind != "RuntimeClass" || rc.Name != "nodeshim" || rc.Handler != "nodeshim" {
		t.Errorf("RuntimeClass %s %s %q handler %q, want node.k8s.io/v1 RuntimeClass nodeshim, handler nodeshim", rc.APIVersion, rc.Kind, rc.Name, rc.Handler)
	}
	var k struct {
		Kustomization
		Patches []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	read(KustomizationFile, &k)
	if k.Kind != "Component" || !slices.Equal(k.Resources, []string{"runtimeclass.yaml"}) || len(k.Patches) != 1 || k.Patches[0].Path != "install-runtime.yaml" {
		t.Errorf("component %s resources %v patches %v", k.Kind, k.Resources, k.Patches)
	}
	base, err := ReadKustomization()
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 || len(base.Images) != 1 || k.Images[0] != base.Images[0] {
		t.Errorf("overlay images %v, base's %v: the init container must run the same image", k.Images, base.Images)
	}
	var ds appsv1.DaemonSet
	read("install-runtime.yaml", &ds)
	ic := ds.Spec.Template.Spec.InitContainers
	if len(ic) != 1 || ic[0].Name != "install-runtime" {
		t.Fatalf("init containers %v", ic)
	}
	if want := []string{"/usr/bin/nodeshim-runc", restoring.InstallFlag, "/host/opt/nodeshim/bin"}; !slices.Equal(ic[0].Command, want) {
		t.Errorf("install-runtime runs %q, want %q", ic[0].Command, want)
	}
	sc := ic[0].SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("install-runtime's security context %+v: it needs no privilege", sc)
	}
	vols := ds.Spec.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].HostPath == nil || vols[0].HostPath.Path != "/opt/nodeshim/bin" ||
		len(ic[0].VolumeMounts) != 1 || ic[0].VolumeMounts[0].Name != vols[0].Name || ic[0].VolumeMounts[0].MountPath != "/host/opt/nodeshim/bin" {
		t.Errorf("install-runtime mounts %v of %v, want the host's /opt/nodeshim/bin", ic[0].VolumeMounts, vols)
	}
}

// TestRuntimeClassKustomizeBuild builds deploy/ with the component with
// kubectl's kustomize: deploy/'s objects plus the RuntimeClass, and the DaemonSet
// with the shim and reporter unchanged and the init container added, in
// the base's image.
func TestRuntimeClassKustomizeBuild(t *testing.T) {
	// An overlay outside deploy/ (kustomize refuses one inside its base),
	// as an operator writes it.
	overlay := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes relative paths only.
	rel, err := filepath.Rel(overlay, wd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, KustomizationFile), []byte("resources:\n- "+rel+"\ncomponents:\n- "+filepath.Join(rel, runtimeClassDir)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl(t), "kustomize", overlay)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", runtimeClassDir, err, stderr.String())
	}
	var rcDoc string
	var rest [][]byte
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.Contains(doc, "kind: RuntimeClass") {
			rcDoc = doc
			continue
		}
		rest = append(rest, []byte(doc))
	}
	if rcDoc == "" {
		t.Fatal("the overlay built no RuntimeClass")
	}
	var rc nodev1.RuntimeClass
	if err := yaml.UnmarshalStrict([]byte(rcDoc), &rc); err != nil || rc.Handler != "nodeshim" || rc.Labels["app.kubernetes.io/part-of"] != "nodeshim" {
		t.Errorf("built RuntimeClass %+v: %v", rc, err)
	}
	built, err := Decode("kubectl kustomize "+runtimeClassDir, bytes.Join(rest, []byte("\n---\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(built) != len(objects(t)) {
		t.Errorf("the overlay built %d objects beside the RuntimeClass, deploy/ has %d", len(built), len(objects(t)))
	}
	base := daemonSet(t)
	k, err := ReadKustomization()
	if err != nil {
		t.Fatal(err)
	}
	image := k.Images[0].NewName + ":" + k.Images[0].NewTag
	for _, o := range built {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := ds.Spec.Template.Spec
		if len(spec.Containers) != len(base.Spec.Template.Spec.Containers) || len(spec.Volumes) != len(base.Spec.Template.Spec.Volumes)+1 {
			t.Errorf("built DaemonSet has %d containers and %d volumes; base %d and %d (+1)", len(spec.Containers), len(spec.Volumes),
				len(base.Spec.Template.Spec.Containers), len(base.Spec.Template.Spec.Volumes))
		}
		if len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != image {
			t.Errorf("built init containers %v, want install-runtime in %s", spec.InitContainers, image)
		}
		return
	}
	t.Error("the overlay built no DaemonSet")
}
