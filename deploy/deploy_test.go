package deploy

import (
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/config"
)

const (
	namespace           = "nodeshim"
	controllerNamespace = "nodeshim-controller"
)

// objects decodes the kustomization's resources or fails the test.
func objects(t *testing.T) []Object {
	t.Helper()
	objs, err := Objects()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// reporterObjects are the objects of every file but the controller's.
func reporterObjects(t *testing.T) []Object {
	t.Helper()
	return slices.DeleteFunc(objects(t), func(o Object) bool {
		return slices.Contains(ControllerFiles, o.File) || slices.Contains(PodCheckpointFiles, o.File) || slices.Contains(PodMigrationFiles, o.File)
	})
}

// controllerObjects are the objects of the controller's files.
func controllerObjects(t *testing.T) []Object {
	t.Helper()
	return slices.DeleteFunc(objects(t), func(o Object) bool { return !slices.Contains(ControllerFiles, o.File) })
}

// only returns the single object of type T, failing unless there is
// exactly one.
func only[T any](t *testing.T, objs []Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.Object.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T, found %d", zero, len(found))
	}
	return found[0]
}

func all[T any](objs []Object) []T {
	var found []T
	for _, o := range objs {
		if v, ok := o.Object.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	return only[*appsv1.DaemonSet](t, objects(t))
}

func deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	return only[*appsv1.Deployment](t, objects(t))
}

func container(t *testing.T, ds *appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet has no container %q", name)
	return corev1.Container{}
}

func volume(t *testing.T, ds *appsv1.DaemonSet, name string) corev1.Volume {
	t.Helper()
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("DaemonSet has no volume %q", name)
	return corev1.Volume{}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	k, err := ReadKustomization()
	if err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization is %s %s", k.APIVersion, k.Kind)
	}
	if k.Namespace != "" {
		t.Errorf("kustomization namespace %q would move the controller into the privileged namespace: every manifest names its own", k.Namespace)
	}
	files, err := fs.Glob(Manifests, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == KustomizationFile || slices.Contains(PodMigrationFiles, f) })
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	if !slices.Equal(got, files) {
		t.Errorf("kustomization resources %v, files in deploy/ but PodMigrationFiles %v: every manifest must be listed once", got, files)
	}
	for _, f := range PodMigrationFiles {
		if _, err := fs.Stat(Manifests, f); err != nil {
			t.Errorf("PodMigrationFiles names %s: %v", f, err)
		}
	}
	var images []string
	for _, im := range k.Images {
		images = append(images, im.Name)
	}
	if !slices.Equal(images, []string{"nodeshim"}) {
		t.Errorf("kustomization images %v, want [nodeshim]", images)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := objects(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[typeName(o.Object)]++
	}
	want := map[string]int{
		"Namespace": 2, "ServiceAccount": 2, "ConfigMap": 1, "ClusterRole": 4,
		"ClusterRoleBinding": 2, "Role": 3, "RoleBinding": 3, "DaemonSet": 1, "Deployment": 1,
		"CustomResourceDefinition": 1,
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s objects, want %d", kinds[k], k, n)
		}
	}
	for k, n := range kinds {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %d %s objects", n, k)
		}
	}
	for _, o := range objs {
		if _, ok := o.Object.(*corev1.Namespace); ok {
			continue
		}
		if _, ok := o.Object.(*rbacv1.ClusterRole); ok {
			continue
		}
		if _, ok := o.Object.(*rbacv1.ClusterRoleBinding); ok {
			continue
		}
		if _, ok := o.Object.(*apiextensionsv1.CustomResourceDefinition); ok {
			continue
		}
		want := namespace
		// The controller's objects live in its own namespace, but for
		// its read access to the reporters' Leases.
		if slices.Contains(ControllerFiles, o.File) && !strings.HasSuffix(o.Object.(metav1.Object).GetName(), "-reporter-leases") {
			want = controllerNamespace
		}
		if ns := namespaceOf(o.Object); ns != want {
			t.Errorf("%s: %s in namespace %q, want %q", o.File, typeName(o.Object), ns, want)
		}
	}
}

// TestDecodeRejects proves that the decoding the other tests rely on is
// strict: each of these documents must fail.
func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		is        error
	}{
		{name: "unknown field", doc: "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\nautomountToken: false\n"},
		{name: "unknown nested field", doc: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      hostNamespace: true\n"},
		{name: "field in the wrong case", doc: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      hostPid: true\n"},
		{name: "duplicate nested field", doc: "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n  labels:\n    a: b\n    a: c\n"},
		{name: "duplicate field", doc: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  name: y\n"},
		{name: "wrong type", doc: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata: [1]\n"},
		{name: "unknown kind", doc: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n", is: ErrUnknownKind},
		{name: "unknown version", doc: "apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: Role\nmetadata:\n  name: x\n", is: ErrUnknownKind},
		{name: "second document bad", doc: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n---\napiVersion: v1\nkind: Namespace\nmetadta:\n  name: y\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("test.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatal("decoded without error")
			}
			if !strings.Contains(err.Error(), "test.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

// TestShimConfigMapLoads feeds the ConfigMap's documents to the shim's own
// configuration loader (the one `nodeshim serve --config-source` runs) and
// checks that the paths it names are the ones the DaemonSet mounts.
func TestShimConfigMapLoads(t *testing.T) {
	objs := objects(t)
	cm := only[*corev1.ConfigMap](t, objs)
	ds := only[*appsv1.DaemonSet](t, objs)
	if len(cm.BinaryData) != 0 {
		t.Errorf("ConfigMap has binaryData keys; the shim reads text documents")
	}
	var p config.Payload
	for name, data := range cm.Data {
		if name != config.BaseFile && !strings.HasSuffix(name, config.DropinSuffix) {
			t.Errorf("ConfigMap key %q is neither %s nor *%s: the shim would ignore it", name, config.BaseFile, config.DropinSuffix)
		}
		p.Files = append(p.Files, config.File{Name: name, Data: []byte(data)})
	}
	sort.Slice(p.Files, func(i, j int) bool { return p.Files[i].Name < p.Files[j].Name })
	cfg, err := p.Load()
	if err != nil {
		t.Fatalf("the shim rejects the ConfigMap: %v", err)
	}
	// The image carries CRIU: checkpoints are on, through the CRI socket
	// the DaemonSet mounts (checked below).
	if !cfg.Checkpoint.Enabled {
		t.Errorf("checkpoints are disabled; the image carries CRIU")
	}
	endpoint, ok := strings.CutPrefix(cfg.ContainerRuntimeEndpoint, "unix://")
	if !ok {
		t.Errorf("containerRuntimeEndpoint %q is not a unix socket", cfg.ContainerRuntimeEndpoint)
	}
	// The reporter reads the socket as its own uid: the shim must admit
	// exactly that uid, read-only, or every read is a 401.
	rep := container(t, ds, "reporter")
	if rep.SecurityContext == nil || rep.SecurityContext.RunAsUser == nil {
		t.Fatal("reporter has no runAsUser")
	}
	if uid := uint32(*rep.SecurityContext.RunAsUser); !slices.Equal(cfg.API.ReadOnlyUIDs, []uint32{uid}) {
		t.Errorf("api.readOnlyUIDs %v, want the reporter's uid [%d]", cfg.API.ReadOnlyUIDs, uid)
	}

	shim := container(t, ds, "shim")
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range shim.VolumeMounts {
		mounts[m.MountPath] = m
	}
	args := map[string]string{}
	for _, a := range shim.Args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Fatalf("shim argument %q is not --flag=value", a)
		}
		args[k] = v
	}
	if shim.Args[0] != "serve" {
		t.Errorf("shim runs %q, want serve", shim.Args[0])
	}
	for _, tc := range []struct {
		what, path string
		writable   bool
	}{
		{what: "rootDir", path: cfg.RootDir, writable: true},
		{what: "--root-dir", path: args["--root-dir"], writable: true},
		{what: "lockFile", path: cfg.LockFile, writable: true},
		{what: "--lock-file", path: args["--lock-file"], writable: true},
		{what: "checkpoint.dir", path: cfg.Checkpoint.Dir, writable: true},
		// Connecting to a unix socket writes to it.
		{what: "containerRuntimeEndpoint", path: endpoint, writable: true},
		{what: "kubeletRootDir", path: cfg.KubeletRootDir},
		{what: "network.cniConfDir", path: cfg.Network.CNIConfDir},
		{what: "--config-source", path: args["--config-source"]},
	} {
		m, ok := mountCovering(mounts, tc.path)
		if !ok {
			t.Errorf("%s %q is not under any of the shim's mounts", tc.what, tc.path)
			continue
		}
		if tc.writable && m.ReadOnly {
			t.Errorf("%s %q is on the read-only mount %s", tc.what, tc.path, m.MountPath)
		}
	}
	if args["--root-dir"] != cfg.RootDir || args["--lock-file"] != cfg.LockFile {
		t.Errorf("flags --root-dir=%s --lock-file=%s differ from the configuration's %s and %s",
			args["--root-dir"], args["--lock-file"], cfg.RootDir, cfg.LockFile)
	}
	if v := volume(t, ds, mounts[args["--config-source"]].Name); v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
		t.Errorf("--config-source %s is not the ConfigMap %s", args["--config-source"], cm.Name)
	}
}

// mountCovering returns the deepest mount that contains p.
func mountCovering(mounts map[string]corev1.VolumeMount, p string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for mp, m := range mounts {
		if (p == mp || strings.HasPrefix(p, mp+"/")) && len(mp) >= len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

// TestShimContainer checks the privileged half: privileged, the host's PID
// namespace, and each host path it needs at the path it reads.
func TestShimContainer(t *testing.T) {
	ds := daemonSet(t)
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("hostPID is off: CRI pids and the lock's pid are host pids")
	}
	if !spec.HostNetwork {
		t.Error("hostNetwork is off: NetworkReady must see the host's links and routes")
	}
	shim := container(t, ds, "shim")
	sc := shim.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Fatal("shim container is not privileged")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("shim does not run as root")
	}
	for _, tc := range []struct {
		mount, host string
		readOnly    bool
		typ         corev1.HostPathType
	}{
		{mount: "/sys", host: "/sys", readOnly: true, typ: corev1.HostPathDirectory},
		{mount: "/sys/fs/cgroup", host: "/sys/fs/cgroup", typ: corev1.HostPathDirectory},
		{mount: "/sys/kernel/btf", host: "/sys/kernel/btf", readOnly: true, typ: corev1.HostPathDirectory},
		{mount: "/host/proc", host: "/proc", readOnly: true, typ: corev1.HostPathDirectory},
		{mount: "/var/lib/kubelet", host: "/var/lib/kubelet", readOnly: true, typ: corev1.HostPathDirectory},
		{mount: "/run/containerd/containerd.sock", host: "/run/containerd/containerd.sock", typ: corev1.HostPathSocket},
		{mount: "/var/run/nodeshim.lock", host: "/var/run/nodeshim.lock", typ: corev1.HostPathFileOrCreate},
		{mount: "/var/lib/nodeshim", host: "/var/lib/nodeshim", typ: corev1.HostPathDirectoryOrCreate},
		{mount: "/etc/cni/net.d", host: "/etc/cni/net.d", readOnly: true, typ: corev1.HostPathDirectoryOrCreate},
		// The writable layers a checkpoint archives, at the host paths the
		// containers' mount tables name.
		{mount: "/var/lib/containerd", host: "/var/lib/containerd", readOnly: true, typ: corev1.HostPathDirectory},
	} {
		t.Run(strings.ReplaceAll(strings.TrimPrefix(tc.mount, "/"), "/", "_"), func(t *testing.T) {
			var m *corev1.VolumeMount
			for i := range shim.VolumeMounts {
				if shim.VolumeMounts[i].MountPath == tc.mount {
					m = &shim.VolumeMounts[i]
				}
			}
			if m == nil {
				t.Fatalf("shim does not mount %s", tc.mount)
			}
			if m.ReadOnly != tc.readOnly {
				t.Errorf("%s readOnly %v, want %v", tc.mount, m.ReadOnly, tc.readOnly)
			}
			v := volume(t, ds, m.Name)
			if v.HostPath == nil {
				t.Fatalf("volume %s is not a hostPath", m.Name)
			}
			if v.HostPath.Path != tc.host {
				t.Errorf("volume %s is host path %s, want %s", m.Name, v.HostPath.Path, tc.host)
			}
			if v.HostPath.Type == nil || *v.HostPath.Type != tc.typ {
				t.Errorf("volume %s type %v, want %s", m.Name, v.HostPath.Type, tc.typ)
			}
		})
	}
	for _, m := range shim.VolumeMounts {
		if m.Name == "reporter-token" {
			t.Error("the shim mounts the reporter's token: it must hold no cluster credentials")
		}
		// The shim mounts tracefs in its own mount namespace when none is
		// mounted; the host's /sys/kernel/tracing is an empty directory on
		// a host that does not mount tracefs, and would hide that mount.
		if m.MountPath == "/sys/kernel/tracing" {
			t.Errorf("the shim mounts volume %s at /sys/kernel/tracing: it mounts tracefs itself", m.Name)
		}
	}
}

// TestEveryShimMountIsExplained checks that each of the shim's volume
// mounts in daemonset.yaml has a comment right above it saying why.
func TestEveryShimMountIsExplained(t *testing.T) {
	data, err := Manifests.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	// Containers are list items at an indent of 6, their fields at 8, the
	// items of volumeMounts at 8 ("        - name: ...").
	inShim, inMounts, n := false, false, 0
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		indent := len(l) - len(strings.TrimLeft(l, " "))
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		case indent == 6 && strings.HasPrefix(trimmed, "- name: "):
			inShim, inMounts = trimmed == "- name: shim", false
		case inShim && indent == 8 && !strings.HasPrefix(trimmed, "- "):
			inMounts = trimmed == "volumeMounts:"
		case inMounts && indent == 8 && strings.HasPrefix(trimmed, "- name: "):
			n++
			if !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
				t.Errorf("daemonset.yaml:%d: shim mount %q has no comment above it", i+1, strings.TrimPrefix(trimmed, "- name: "))
			}
		case indent < 6:
			inShim, inMounts = false, false
		}
	}
	if want := len(container(t, daemonSet(t), "shim").VolumeMounts); n != want {
		t.Errorf("found %d mounts in the text of the shim's volumeMounts, the decoded container has %d", n, want)
	}
}

// TestReporterContainer checks the unprivileged half.
func TestReporterContainer(t *testing.T) {
	ds := daemonSet(t)
	r := container(t, ds, "reporter")
	sc := r.SecurityContext
	if sc == nil {
		t.Fatal("reporter has no securityContext")
	}
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("reporter: %s", what)
		}
	}
	check("runAsNonRoot is not true", sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
	check("runAsUser is root or unset", sc.RunAsUser != nil && *sc.RunAsUser != 0)
	check("runAsGroup is root or unset", sc.RunAsGroup != nil && *sc.RunAsGroup != 0)
	check("readOnlyRootFilesystem is not true", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem)
	check("allowPrivilegeEscalation is not false", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation)
	check("privileged", sc.Privileged == nil || !*sc.Privileged)
	check("capabilities are not exactly drop ALL",
		sc.Capabilities != nil && len(sc.Capabilities.Add) == 0 && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}))
	check("seccompProfile is not RuntimeDefault",
		sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
	check("procMount is set", sc.ProcMount == nil)

	if !slices.Equal(r.Command, []string{"/usr/bin/nodeshim-reporter"}) {
		t.Errorf("reporter runs %q, want the image's /usr/bin/nodeshim-reporter", r.Command)
	}
	var socket string
	for _, a := range r.Args {
		if v, ok := strings.CutPrefix(a, "--socket="); ok {
			socket = v
		}
	}
	var socketMount string
	for _, m := range r.VolumeMounts {
		if m.Name == "state" {
			socketMount = m.MountPath
		}
	}
	if want := filepath.Join(socketMount, api.SocketName); socketMount == "" || socket != want {
		t.Errorf("reporter --socket=%q, want %q (the shim's socket in the shared state mount)", socket, want)
	}
	var state, token bool
	for _, m := range r.VolumeMounts {
		v := volume(t, ds, m.Name)
		switch {
		case m.Name == "state":
			state = true
			check("mounts the shim's socket dir writable", m.ReadOnly)
		case m.Name == "reporter-token":
			token = true
			check("token mount not read-only", m.ReadOnly)
			check("token not at the in-cluster path", m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount")
		case v.HostPath != nil:
			t.Errorf("reporter mounts host path %s", v.HostPath.Path)
		}
	}
	check("does not share the shim's socket dir", state)
	check("has no ServiceAccount token", token)
	for _, c := range container(t, ds, "shim").VolumeMounts {
		if c.Name == "state" {
			for _, m := range r.VolumeMounts {
				if m.Name == "state" && m.MountPath != c.MountPath {
					t.Errorf("socket dir at %s in the shim, %s in the reporter", c.MountPath, m.MountPath)
				}
			}
		}
	}
}

func TestPodScheduling(t *testing.T) {
	objs := reporterObjects(t)
	ds := only[*appsv1.DaemonSet](t, objs)
	sa := only[*corev1.ServiceAccount](t, objs)
	spec := ds.Spec.Template.Spec
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
	}
	// One toleration with operator Exists and no key or effect tolerates
	// every taint.
	if len(spec.Tolerations) != 1 || spec.Tolerations[0] != (corev1.Toleration{Operator: corev1.TolerationOpExists}) {
		t.Errorf("tolerations %+v, want exactly [{operator: Exists}]", spec.Tolerations)
	}
	if spec.NodeSelector != nil || spec.Affinity != nil {
		t.Errorf("the DaemonSet restricts its nodes: nodeSelector %v affinity %v", spec.NodeSelector, spec.Affinity)
	}
	sel, err := labelsSelector(ds)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %s does not match the template's labels %v", sel, ds.Spec.Template.Labels)
	}
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", spec.ServiceAccountName, sa.Name)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod automounts the token into every container, the shim included")
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the ServiceAccount automounts its token")
	}
	v := volume(t, ds, "reporter-token")
	if v.Projected == nil {
		t.Fatal("reporter-token is not a projected volume")
	}
	var tok, ca, ns bool
	for _, s := range v.Projected.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			tok = s.ServiceAccountToken.Path == "token" && s.ServiceAccountToken.Audience == ""
		case s.ConfigMap != nil:
			ca = s.ConfigMap.Name == "kube-root-ca.crt"
		case s.DownwardAPI != nil:
			ns = len(s.DownwardAPI.Items) == 1 && s.DownwardAPI.Items[0].Path == "namespace"
		}
	}
	if !tok || !ca || !ns {
		t.Errorf("reporter-token: token %v, ca.crt %v, namespace %v; client-go's in-cluster config needs all three", tok, ca, ns)
	}
}

func labelsSelector(ds *appsv1.DaemonSet) (labels.Selector, error) {
	return labels.ValidatedSelectorFromSet(ds.Spec.Selector.MatchLabels)
}

// footprint is what BENCHMARKS.md (footprint) measured (make bench-footprint,
// 1,000 pod cgroups, the reporter publishing to a real API server): the
// mean VmRSS over the idle window and the peak VmHWM, in MiB, and the CPU
// in millicores (the larger of idle and pressure); all rounded up.
var footprint = map[string]struct{ steadyMiB, peakMiB, milliCPU int64 }{
	"shim":     {steadyMiB: 30, peakMiB: 34, milliCPU: 3},
	"reporter": {steadyMiB: 20, peakMiB: 20, milliCPU: 2},
}

// TestResources checks that requests and limits follow the measured
// footprint: the memory request covers the steady RSS, the limit leaves
// room over the peak, and no CPU limit throttles a node agent.
func TestResources(t *testing.T) {
	ds := daemonSet(t)
	for _, c := range ds.Spec.Template.Spec.Containers {
		t.Run(c.Name, func(t *testing.T) {
			fp, measured := footprint[c.Name]
			req, lim := c.Resources.Requests, c.Resources.Limits
			for _, q := range []struct {
				what string
				list corev1.ResourceList
				name corev1.ResourceName
			}{{"requests", req, corev1.ResourceCPU}, {"requests", req, corev1.ResourceMemory}, {"limits", lim, corev1.ResourceMemory}} {
				if _, ok := q.list[q.name]; !ok {
					t.Errorf("%s.%s is not set", q.what, q.name)
				}
			}
			if _, ok := lim[corev1.ResourceCPU]; ok {
				t.Error("limits.cpu is set: CFS throttling would delay the node agent's reactions")
			}
			mib := func(q resource.Quantity) int64 { return q.Value() >> 20 }
			if got, lim := mib(req[corev1.ResourceMemory]), mib(lim[corev1.ResourceMemory]); got > lim {
				t.Errorf("requests.memory %d MiB over limits.memory %d MiB", got, lim)
			}
			if !measured {
				fp.steadyMiB, fp.peakMiB, fp.milliCPU = 0, 0, 0
			}
			if cpu := req[corev1.ResourceCPU]; cpu.MilliValue() < fp.milliCPU {
				t.Errorf("requests.cpu %dm is under the measured %dm", cpu.MilliValue(), fp.milliCPU)
			}
			if got := mib(req[corev1.ResourceMemory]); got < fp.steadyMiB {
				t.Errorf("requests.memory %d MiB is under the measured steady RSS %d MiB", got, fp.steadyMiB)
			}
			if got := mib(lim[corev1.ResourceMemory]); got < 2*fp.peakMiB {
				t.Errorf("limits.memory %d MiB is under twice the measured peak RSS %d MiB", got, fp.peakMiB)
			}
			var gomemlimit bool
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
					e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
					gomemlimit = true
				}
			}
			if !gomemlimit {
				t.Error("GOMEMLIMIT does not follow limits.memory")
			}
		})
	}
}

// TestRBACLeastPrivilege compares the reporter's rights with exactly the
// list it needs: no wildcard, no extra verb, resource or group.
func TestRBACLeastPrivilege(t *testing.T) {
	objs := reporterObjects(t)
	sa := only[*corev1.ServiceAccount](t, objs)
	cr := only[*rbacv1.ClusterRole](t, objs)
	role := only[*rbacv1.Role](t, objs)

	wantCluster := []string{
		"core/events create",
		"core/nodes get",
		"core/nodes/status patch",
		"core/pods get",
		"nodeshim.io/podcheckpoints list",
		"nodeshim.io/podcheckpoints update",
		"nodeshim.io/podcheckpoints watch",
		"nodeshim.io/podcheckpoints/status update",
	}
	wantRole := []string{
		"coordination.k8s.io/leases create",
		"coordination.k8s.io/leases get",
		"coordination.k8s.io/leases update",
	}
	if got := flatten(t, "ClusterRole "+cr.Name, cr.Rules); !slices.Equal(got, wantCluster) {
		t.Errorf("ClusterRole %s grants\n  %s\nwant exactly\n  %s", cr.Name, strings.Join(got, "\n  "), strings.Join(wantCluster, "\n  "))
	}
	if got := flatten(t, "Role "+role.Name, role.Rules); !slices.Equal(got, wantRole) {
		t.Errorf("Role %s grants\n  %s\nwant exactly\n  %s", role.Name, strings.Join(got, "\n  "), strings.Join(wantRole, "\n  "))
	}
	if cr.AggregationRule != nil {
		t.Error("the ClusterRole aggregates other roles")
	}
	if role.Namespace != namespace {
		t.Errorf("the lease Role is in namespace %q, want %q", role.Namespace, namespace)
	}

	bindings := 0
	for _, b := range all[*rbacv1.ClusterRoleBinding](objs) {
		bindings++
		checkBinding(t, "ClusterRoleBinding "+b.Name, b.RoleRef, b.Subjects, "ClusterRole", cr.Name, sa)
	}
	for _, b := range all[*rbacv1.RoleBinding](objs) {
		bindings++
		if b.Namespace != role.Namespace {
			t.Errorf("RoleBinding %s in %q, its Role in %q", b.Name, b.Namespace, role.Namespace)
		}
		checkBinding(t, "RoleBinding "+b.Name, b.RoleRef, b.Subjects, "Role", role.Name, sa)
	}
	if bindings != 2 {
		t.Errorf("%d bindings, want 2 (the ClusterRole's and the Role's)", bindings)
	}
}

// flatten lists a role's rules as "group/resource verb", sorted, and fails
// on a wildcard, a resourceName or a non-resource URL.
func flatten(t *testing.T, what string, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var out []string
	for i, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("%s rule %d: nonResourceURLs %v resourceNames %v", what, i, r.NonResourceURLs, r.ResourceNames)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, s := range []string{g, res, v} {
						if strings.Contains(s, "*") {
							t.Errorf("%s rule %d: wildcard %q", what, i, s)
						}
					}
					if g == "" {
						g = "core"
					}
					out = append(out, path.Join(g, res)+" "+v)
				}
			}
		}
	}
	sort.Strings(out)
	if len(slices.Compact(slices.Clone(out))) != len(out) {
		t.Errorf("%s grants a right twice: %v", what, out)
	}
	return out
}

func checkBinding(t *testing.T, what string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind, name string, sa *corev1.ServiceAccount) {
	t.Helper()
	if ref != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}) {
		t.Errorf("%s refers to %+v, want %s %s", what, ref, kind, name)
	}
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
	if !slices.Equal(subjects, want) {
		t.Errorf("%s binds %+v, want only %+v", what, subjects, want)
	}
}

func typeName(o any) string { return reflect.TypeOf(o).Elem().Name() }

func namespaceOf(o any) string { return o.(metav1.Object).GetNamespace() }

// TestPodCheckpointRoles: a namespace's admins and editors get exactly
// create, delete and read of PodCheckpoints, its viewers read, by
// aggregation into Kubernetes' own roles; nobody but the reporter writes
// their status.
func TestPodCheckpointRoles(t *testing.T) {
	want := map[string]struct {
		labels []string
		rules  []string
	}{
		"nodeshim-podcheckpoints-edit": {
			[]string{"rbac.authorization.k8s.io/aggregate-to-admin", "rbac.authorization.k8s.io/aggregate-to-edit"},
			[]string{"nodeshim.io/podcheckpoints create", "nodeshim.io/podcheckpoints delete", "nodeshim.io/podcheckpoints get",
				"nodeshim.io/podcheckpoints list", "nodeshim.io/podcheckpoints watch"},
		},
		"nodeshim-podcheckpoints-view": {
			[]string{"rbac.authorization.k8s.io/aggregate-to-view"},
			[]string{"nodeshim.io/podcheckpoints get", "nodeshim.io/podcheckpoints list", "nodeshim.io/podcheckpoints watch"},
		},
	}
	var seen int
	for _, o := range objects(t) {
		cr, ok := o.Object.(*rbacv1.ClusterRole)
		if !ok || !slices.Contains(PodCheckpointFiles, o.File) {
			continue
		}
		seen++
		w, ok := want[cr.Name]
		if !ok {
			t.Errorf("unexpected ClusterRole %s in %s", cr.Name, o.File)
			continue
		}
		var labels []string
		for k, v := range cr.Labels {
			if v == "true" {
				labels = append(labels, k)
			}
		}
		sort.Strings(labels)
		if !slices.Equal(labels, w.labels) {
			t.Errorf("ClusterRole %s aggregates into %v, want %v", cr.Name, labels, w.labels)
		}
		if got := flatten(t, "ClusterRole "+cr.Name, cr.Rules); !slices.Equal(got, w.rules) {
			t.Errorf("ClusterRole %s grants %v, want %v", cr.Name, got, w.rules)
		}
	}
	if seen != len(want) {
		t.Errorf("%d PodCheckpoint ClusterRoles, want %d", seen, len(want))
	}
}
