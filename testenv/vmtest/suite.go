package vmtest

// Decision says whether the guests run one package's ordinary (untagged)
// tests, the host suite's, besides its vmtest-tagged ones.
type Decision struct {
	// Rel is the package's directory relative to the module root.
	Rel string
	// Run says that the guests run every test of the package.
	Run bool
	// Why says what the package's tests check in a guest when Run is set,
	// and what a guest lacks for them when it is not.
	Why string
}

// HostSuite is the one list that decides, for every package of the module
// with tests, whether the guests run its host suite. A package with tests
// that is not listed fails Discover, so a new package is decided here.
//
// A package runs in the guest when its tests need nothing the guest lacks,
// or when only some of its tests need a peer of GuestLacks: those skip
// there through testutil.SkipIfGuestLacks, naming the peer. A package is
// left out when its tests are about the host or the build rather than the
// kernel, or when nearly all of them need a peer.
func HostSuite() []Decision {
	return []Decision{
		{"bpf", true, "BPF probes, tracefs and the OOM and seccomp tracers against the guest's kernel and BTF"},
		{"cgroup", true, "the cgroup2 layout, PSI and the pressure triggers on a pure cgroup v2 machine"},
		{"cmd/nodeshim", true, "the CLI's report, pressure, seccomp exec and record against the guest's kernel; " +
			"serve, reporter and the C workload need go, kube-apiserver and gcc and skip"},
		{"condition", true, "portable: condition evaluation"},
		{"criu", false, "every test checkpoints with CRIU, which make builds from Debian trixie into .tools " +
			"with its own loader and libraries and the guest does not carry"},
		{"criu/archive", false, "the archive format and its hostile-input checks do not depend on the kernel; they run on the host"},
		{"criu/archive/seal", false, "encryption, signatures and the trust policy are the same on any kernel; its tests mount a tmpfs on the host"},
		{"criu/image", false, "its tests build images from archives that CRIU makes, and CRIU is not in the guest"},
		{"criu/pod", false, "its tests freeze pod cgroups and checkpoint with CRIU, which the guest does not carry; " +
			"pod checkpoints of real pods are tested in shim/checkpoint on the host's containerd"},
		{"deploy", false, "the manifests, the static build and the footprint need kubectl, a kube-apiserver " +
			"with etcd and the go toolchain: they test the deployment, not the kernel"},
		{"eviction", true, "the pressure policy on the guest's own readings and on cgroup's recorded tree"},
		{"internal/atomicfile", true, "file replacement on the guest's tmpfs"},
		{"testenv/clustertest", false, "its test is the single-node cluster itself: kubelet, containerd and the control plane"},
		{"testenv/criutest", false, "its test is the CRIU gate itself, and CRIU is not in the guest"},
		{"testenv/dockerfile", false, "its tests read the repository's Dockerfile, which the guest does not carry"},
		{"testenv/fakecri", true, "a CRI server on a unix socket"},
		{"internal/errdefs", true, "portable: no kernel dependency"},
		{"e2e/podrestore", false, "its test is a Pod restored from a checkpoint image through kubelet on the single-node cluster"},
		{"e2e/runtimeclass", false, "its test is a Pod restored under nodeshim's RuntimeClass through kubelet on the single-node cluster"},
		{"testenv/downtime", false, "its tests watch the benchmarks' counting workload and podman's moves on the host; the benchmarks that use it run on the host"},
		{"e2e/migration", false, "its test moves a Pod between two nodes of one cluster on the host (two kubelets, two containerds, a network namespace)"},
		{"e2e/fleet", false, "its benchmark is a fleet of reporters against a kube-apiserver with etcd; " +
			"its parser tests are portable and run on the host"},
		{"testenv/golden", true, "portable: golden files from the package's testdata"},
		{"testenv/kubetest", false, "its test is the kube-apiserver and etcd fixture itself"},
		{"internal/metricsserver", true, "the metrics and health server on the guest's loopback"},
		{"internal/mountinfo", true, "the guest's own mount table besides the recorded ones"},
		{"testenv/nodevm", false, "its ordinary tests are the node harness's own, on the host; its scenarios " +
			"run in the node it boots (make vmtest-node)"},
		{"internal/procfs", true, "the guest's /proc"},
		{"testenv/registrytest", false, "its tests run Debian's docker-registry, which the guest does not carry"},
		{"testenv/runtimetest", false, "its tests are the container runtimes themselves (containerd, podman, runc, crun), which the guest does not carry"},
		{"internal/ref", true, "portable: the container reference"},
		{"internal/syncbuf", true, "portable: a locked buffer"},
		{"testenv/testproc", true, "starting, waiting for and stopping a process with its log"},
		{"testenv/testutil", false, "TestEverySkipGoesThroughTheGate reads the module's source tree, " +
			"which the image does not carry; the gate's other tests do not depend on the kernel"},
		{"testenv/testworkload", true, "the test workloads that the other packages start"},
		{"testenv/vmtest", false, "its ordinary tests are the harness's own, on the host (QEMU, cpio, apt, " +
			"the go command); its guest tests run everywhere"},
		{"kernel", true, "every kernel probe against the guest, expectations derived from the guest itself"},
		{"kernel/capability", true, "portable: the verdict vocabulary and report"},
		{"kernel/seccomp/runtimeneeds", false, "it measures the host's runc and crun starting a container, and the guest carries no runtime"},
		{"kernel/seccomp/auditlog", false, "it reads the host's audit netlink group while a child of the test runs under a complain-mode filter; the guest kernel's audit records are left to its console"},
		{"shim/complaints", false, "its test runs CRI containers under a complain-mode profile through containerd, which the guest does not carry"},
		{"kernel/seccomp", true, "seccomp filters loaded into the guest's kernel, run against busybox's programs"},
		{"report", true, "the whole catalogue collected twice against the guest's kernel, the second from the per-boot caches"},
		{"shim/api", true, "the API over a unix socket with peer credentials"},
		{"shim/checkpoint", true, "portable: the checkpoint service with a fake checkpointer"},
		{"shim/checkpoint/checkpointtest", true, "portable: the fake checkpointer the API's tests use"},
		{"criu/workentry", true, "the work entries' names, their owners judged by pid and start time, and the OFD target locks on the guest's kernel"},
		{"shim/checkpoint/retention", false, "its tests prune real CRIU archives, and CRIU is not in the guest"},
		{"shim/client", true, "the client over a unix socket"},
		{"shim/transfer", true, "two node APIs on the guest's loopback over mutual TLS: a pod checkpoint sealed, sent, verified and stored, and every refusal"},
		{"cluster/apis/v1alpha1", true, "portable: the PodCheckpoint types against deploy/'s CustomResourceDefinition"},
		{"cluster/podcheckpoint", false, "every test runs the handler against a kube-apiserver with etcd"},
		{"cluster/migration", false, "its test runs the controller against a kube-apiserver with etcd, which the guest does not carry"},
		{"deploy/krew", false, "krew installs the plugin it builds with go, neither of which the guest carries"},
		{"cluster/drain", true, "portable: what a drain does with each kind of pod"},
		{"cluster/migrationsend", true, "portable: the send request from a Node's labels and which migrations wait"},
		{"cluster/kubectl", false, "the kubectl plugin against a kube-apiserver with etcd"},
		{"cluster/controller", false, "every test runs the controller against a kube-apiserver with etcd"},
		{"shim/config", true, "config loading, drop-ins and the crash-safe store on the guest's tmpfs"},
		{"runtimes/cri", true, "the CRI client against a fake runtime on a unix socket"},
		{"shim/daemon", true, "the daemon with its sources on a pure cgroup v2 machine; checkpoints need criu and skip"},
		{"cluster/election", false, "the election is tested against a kube-apiserver with etcd, beside client-go's elector"},
		{"shim/lock", true, "the node lock across processes"},
		{"shim/metrics", true, "portable: the Prometheus collectors"},
		{"shim/network", true, "the network source against the guest's netlink"},
		{"shim/oom", true, "the OOM source with a real OOM kill in a cgroup2 memory controller"},
		{"shim/plugin", true, "the plugin watcher on the guest's tmpfs"},
		{"runtimes/podman", false, "its tests read podman's state and checkpoint podman containers with CRIU: runtimes the guest does not carry"},
		{"runtimes/restoring", true, "portable: the RuntimeClass wrapper's command line, config and routing of calls"},
		{"runtimes/restoring/restore", false, "its tests restore containers through containerd 2.x's runc shim and CRI, which the guest does not carry"},
		{"shim/pressure", true, "the pressure source with PSI triggers on a pure cgroup v2 machine"},
		{"shim/profiles", true, "the seccomp profile installer: libseccomp compiles, files on the guest's tmpfs"},
		{"shim/profiles/ociprofile", false, "profiles from an OCI registry: its tests talk to Debian's docker-registry and run containerd's containers, which the guest does not carry; nothing in it is about the kernel"},
		{"cluster/reporter", true, "the condition planning; the publishing tests need a kube-apiserver and skip"},
		{"cluster/reporter/command", true, "portable: the reporter process's flags and readiness"},
		{"cluster/kubeapi", false, "its client is tested against a kube-apiserver with etcd"},
		{"shim/source", true, "portable: the source supervisor"},
		{"shim/source/sourcetest", true, "portable: the source test helpers"},
		{"shim/status", true, "portable: the status model"},
	}
}

// Peer is a program outside nodeshim that some tests run or talk to and
// that the guests do not have.
type Peer struct {
	// Name is the program's name, as tests pass it to testutil.RequireBinary
	// or testutil.SkipIfGuestLacks.
	Name string
	// Why says why the image does not carry it.
	Why string
}

// GuestLacks lists the peers the guests do not have. The init script passes
// their names in NODESHIM_GUEST_LACKS, and a test that needs one skips in
// the guest with a reason that names it (testutil.SkipIfGuestLacks): the
// host's run of the same test, where make installs the peer, covers it.
func GuestLacks() []Peer {
	return []Peer{
		{"go", "the toolchain (hundreds of MB) would compile under TCG; the binaries are built on the host"},
		{"gcc", "a C toolchain with its headers and libraries; nothing in the guest compiles"},
		{"kube-apiserver", "the control plane needs etcd, certificates and minutes of TCG time to start"},
		{"etcd", "only the kube-apiserver uses it"},
		{"kubectl", "only the deployment tests use it, against a kube-apiserver"},
		{"criu", "CRIU comes from Debian trixie with its own loader and libraries under .tools"},
		{"checkpointctl", "it reads CRIU's archives, which the guest does not make"},
		{"containerd", "the container runtimes and their images are the host's (testenv/runtimetest)"},
		{"podman", "the container runtimes and their images are the host's (testenv/runtimetest)"},
		{"crictl", "it talks to containerd, which the guest does not have"},
		{"docker-registry", "the OCI registry of the oci:// seccomp profile tests (testenv/registrytest); the kernel plays no part in them"},
	}
}

// Program is a program of the host's Debian system that the image carries,
// with the shared libraries it loads, because tests run it and busybox has
// no applet of that name.
type Program struct {
	// Name is the program's name on PATH.
	Name string
	// Why names the tests that run it.
	Why string
}

// GuestPrograms lists the programs copied from the host into the image's
// /usr/local/bin. Each is small and needs only libc.
func GuestPrograms() []Program {
	return []Program{
		{"setarch", "kernel/seccomp's personality(2) argument filters (util-linux)"},
		{"setsid", "testenv/testworkload's workloads, started with util-linux's `setsid -f`, which busybox's setsid lacks"},
		{"getent", "kernel/seccomp's runtime-default profile around NSS lookups of /etc/hosts (libc-bin)"},
	}
}

// Module is a kernel module that the guests can load: the image carries it
// from the kernel package, with depmod's files, and the kernel loads it on
// demand through busybox's modprobe, as it does on a node.
type Module struct {
	// Name is the module's name, with underscores.
	Name string
	// Why names the tests that need it.
	Why string
}

// GuestModules lists the modules the guests carry. Debian builds them as
// modules (=m); all of them would take 100-400 MB of the guest's memory.
func GuestModules() []Module {
	return []Module{
		{"veth", "shim/network's links in a namespace"},
		{"nfnetlink", "NETLINK_NETFILTER, for the nftables probe"},
		{"nf_tables", "kernel's nftables.kernel probe"},
		{"libcrc32c", "nf_tables depends on it"},
		{"crc32c_generic", "libcrc32c asks the crypto API for crc32c"},
		{"overlay", "kernel's mounts.overlayfs probe"},
	}
}
