package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// envKubectl names the kubectl binary the tests run; mk/deploy.mk sets it
// to Debian trixie's kubectl unpacked under .tools.
const envKubectl = "NODESHIM_KUBECTL"

func kubectl(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envKubectl); p != "" {
		if _, err := os.Stat(p); err != nil {
			testutil.Skip(t, "%s=%s: %v (run `make kubectl`)", envKubectl, p, err)
		}
		return p
	}
	return testutil.RequireBinary(t, "kubectl")
}

// kustomizeBuild runs kubectl's own kustomize on this directory.
func kustomizeBuild(t *testing.T) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl(t), "kustomize", ".")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr.String())
	}
	return out
}

// TestKustomizeBuild builds deploy/ with kubectl's kustomize and checks the
// output: the same objects as the files, strictly decodable, with the
// image set, the labels added, and the DaemonSet's selector untouched (a
// selector change would make the DaemonSet impossible to update in place).
func TestKustomizeBuild(t *testing.T) {
	built, err := Decode("kubectl kustomize", kustomizeBuild(t))
	if err != nil {
		t.Fatal(err)
	}
	files := objects(t)
	if len(built) != len(files) {
		t.Fatalf("kustomize built %d objects from %d", len(built), len(files))
	}
	names := func(o runtime.Object) string {
		m := o.(metav1.Object)
		return typeName(o) + "/" + m.GetNamespace() + "/" + m.GetName()
	}
	want := map[string]bool{}
	for _, o := range files {
		want[names(o.Object)] = true
	}
	k, err := ReadKustomization()
	if err != nil {
		t.Fatal(err)
	}
	image := k.Images[0].NewName + ":" + k.Images[0].NewTag
	for _, o := range built {
		n := names(o)
		if !want[n] {
			t.Errorf("kustomize built %s, which is not in the files", n)
		}
		if l := o.(metav1.Object).GetLabels()["app.kubernetes.io/name"]; l != "nodeshim" {
			t.Errorf("%s has app.kubernetes.io/name %q", n, l)
		}
		if d, ok := o.(*appsv1.Deployment); ok {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Image != image {
					t.Errorf("container %s image %q, want %q", c.Name, c.Image, image)
				}
			}
		}
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Image != image {
				t.Errorf("container %s image %q, want %q", c.Name, c.Image, image)
			}
		}
		orig := daemonSet(t)
		if len(ds.Spec.Selector.MatchLabels) != len(orig.Spec.Selector.MatchLabels) {
			t.Errorf("kustomize changed the DaemonSet's selector to %v", ds.Spec.Selector.MatchLabels)
		}
	}
}
