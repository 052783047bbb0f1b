// Package nodevm boots the node Kubernetes runs today as a test node under
// QEMU and runs nodeshim's node scenarios inside it (`make vmtest-node`).
//
// The host tests prove nodeshim on a hybrid cgroup machine with the cgroupfs
// driver; real nodes are pure cgroup v2 with systemd as init and kubelet's
// systemd cgroup driver, containerd 2.x and runc >= 1.3, where pods live
// under kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
// cri-containerd-<id>.scope, the freezer is cgroup.freeze, every pod has
// its own PSI files and OOM kills are counted in memory.events. The node
// here is that machine:
//
//   - the kernel is Debian trixie's 6.12, fetched by testenv/vmtest's
//     Fetcher (its own cache under .cache/vmtest/node, with the modules of
//     Modules kept, uncompressed);
//   - the root filesystem is Debian trixie (debootstrap --variant=minbase
//     with systemd, systemd-sysv, dbus, kmod, crun, podman, criu, libcriu2,
//     iproute2 and the CNI plugins; RootfsPackages), made once and cached by its package
//     list, then copied (hard links) into a staging tree per run with the
//     kernel's modules, runc, containerd, crictl, nodeshim, kubectl and
//     checkpointctl (and containerd v2.4 in Containerd24Bin, which a
//     scenario runs in place of the node's), the scenarios' test binary, the test images (with
//     nodeshim's own image, BuildNodeshimImage: built here as the
//     Dockerfile makes it, for the DaemonSet scenario) and the systemd
//     units, and written into an ext4 image (mkfs.ext4 -d) that QEMU
//     serves as a virtio disk;
//   - a small busybox initramfs loads the virtio disk's and ext4's modules,
//     mounts the disk and switch_roots to systemd;
//   - systemd starts containerd (SystemdCgroup = true, runc as its
//     handler, CRIU for checkpoints) and `nodeshim serve`, each a systemd
//     service, then the scenarios' unit, which waits for both, runs the
//     test binary and powers the node off;
//   - the node is a Kubernetes node of a control plane on the host
//     (StartControlPlane: etcd, kube-apiserver with the Node authorizer,
//     kube-controller-manager and kube-scheduler, at kubelet's version, on
//     the host's loopback), as a second node of a host's cluster would be: QEMU's
//     user-mode network with restrict=on lets no packet of the node leave
//     the machine, and its one guestfwd takes APIServerAddress:6443 to the
//     API server's port on 127.0.0.1 (the API server does not reach the
//     node: no logs or exec through it). kubelet's unit (cgroupDriver
//     systemd, failCgroupV1 at its default) is installed with a
//     kubeconfig as system:node:<name>, and an admin kubeconfig for the
//     scenarios; the kubelet scenarios start kubelet and stop it, last,
//     because a running kubelet kills the pods the API server does not
//     list, which the CRI scenarios' are. `nodeshim reporter` runs there
//     as nobody (ReporterUID, a read-only peer of serve's socket) with the
//     node's credentials, its Lease allowed by a Role bound to the node's
//     user; and deploy/'s DaemonSet runs there as an operator applies it
//     (kubectl apply -k through the API server, nodeshim.service stopped
//     meanwhile: the two shims take the same lock).
//
// QEMU runs under TCG only (-machine accel=tcg -cpu max -smp 2 -m 3072M), once
// per run: every scenario runs in the same boot. The scenarios are the
// `//go:build nodevm` tests in *_node_test.go files of testenv/nodevm/nodetest;
// their verbose output comes back on the second serial port, and the
// harness prints `N passed, N failed` with each scenario's time, the time
// from QEMU's start to containerd answering, and fails when any scenario
// failed, when none ran, or when the guest hung or panicked. The console,
// the scenarios' output and the node's journal of containerd and nodeshim
// are kept under .cache/vmtest/node/artifacts.
package nodevm
