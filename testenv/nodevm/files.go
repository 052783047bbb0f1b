package nodevm

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

// Paths on the node.
const (
	// NodeBin holds runc, containerd and its shim, ctr, crictl and nodeshim.
	NodeBin = "/usr/local/bin"
	// NodeLib holds the scenarios' test binary, the runner script and the
	// test images.
	NodeLib = "/usr/local/lib/nodeshim-node"
	// ContainerdSocket is containerd's gRPC (and CRI) socket.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// NodeshimRoot is nodeshim serve's --root-dir; its API socket is
	// nodeshim.sock there.
	NodeshimRoot = "/var/lib/nodeshim"
	// NodeshimConfig is nodeshim serve's --config-source.
	NodeshimConfig = "/etc/nodeshim/config"
	// TestBinary is the scenarios' test binary's name under NodeLib.
	TestBinary = "node.test"
	// TestName is the name the console markers give the scenarios' run.
	TestName = "node"
	// Hostname is the node's name.
	Hostname = "nodeshim-node"
	// RuntimeClassBin holds nodeshim-runc and nodeshim-runc-restore, and
	// nodeshim-runc.json, as deploy/runtimeclass installs them.
	RuntimeClassBin = "/opt/nodeshim/bin"
	// RuntimeClassHandler is containerd's runtime handler of
	// nodeshim-runc, and the RuntimeClass's name.
	RuntimeClassHandler = "nodeshim"
	// Containerd24Bin holds containerd v2.4's containerd, its shim and
	// ctr, when the harness has them (Binaries.Containerd24Dir): the
	// newest containerd, which has no restore of its own, that a scenario
	// puts in place of the node's containerd (Containerd24DropIn).
	Containerd24Bin = "/opt/containerd-2.4/bin"
	// Containerd24Config is that containerd's config: the node's, with a
	// root and state of its own, so that the node's containerd finds its
	// own again when the scenario puts it back.
	Containerd24Config = "/etc/containerd/config-2.4.toml"
	// ContainerdDropInDir is where a scenario puts containerd.service's
	// drop-ins: under /run, so that none outlives the boot.
	ContainerdDropInDir = "/run/systemd/system/containerd.service.d"
)

// Containerd24DropIn is the drop-in of containerd.service that runs
// Containerd24Bin's containerd with Containerd24Config, its shim first on
// PATH (containerd looks a shim up on PATH before its own directory), on
// the same socket, which kubelet and nodeshim keep using.
const Containerd24DropIn = `[Service]
ExecStart=
ExecStart=` + Containerd24Bin + `/containerd --config ` + Containerd24Config + `
Environment=PATH=` + Containerd24Bin + `:` + NodeBin + `:/usr/sbin:/usr/bin:/sbin:/bin
`

// TimeMarker starts the console lines in which the node says when it
// reached a point of its boot, in seconds of its uptime:
// "NODESHIM-NODE: time <what> <seconds>".
const TimeMarker = "NODESHIM-NODE:"

// JournalMarker separates the scenarios' output from the node's journal on
// the second serial port.
const JournalMarker = "=== NODE JOURNAL"

// File is one file the harness writes into the node's root filesystem.
type File struct {
	// Path is the absolute path on the node.
	Path string
	// Mode is its permission bits.
	Mode os.FileMode
	// Data is its content; Link, when set, makes it a symlink instead.
	Data string
	// Link is a symlink's target.
	Link string
}

// ContainerdConfig is containerd 2.x's config (version 3) on the node:
// the systemd cgroup driver (SystemdCgroup = true, as kubeadm sets up),
// runc at runc as the default handler and Debian's crun as the crun
// handler, nodeshim-runc in RuntimeClassBin as the RuntimeClassHandler
// handler (docs/runtimeclass.md's stanza), the CRI plugin's CRIU support with
// restore through CreateContainer, the CNI bridge network, and the test
// pause image as the sandbox image (no registry is reachable).
func ContainerdConfig(runc, pauseImage string) string {
	return containerdConfig("/var/lib/containerd", "/run/containerd", runc, pauseImage)
}

// containerdConfig is ContainerdConfig with root and state.
func containerdConfig(root, state, runc, pauseImage string) string {
	rt := `plugins."io.containerd.cri.v1.runtime"`
	return fmt.Sprintf(`version = 3
root = %[7]q
state = %[8]q
imports = []
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[1]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %[2]q
[%[3]s]
  enable_selinux = false
  enable_criu = true
  enable_experimental_restore_via_create = true
[%[3]s.containerd]
  default_runtime_name = "runc"
[%[3]s.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[%[3]s.containerd.runtimes.runc.options]
  BinaryName = %[4]q
  SystemdCgroup = true
[%[3]s.containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[%[3]s.containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
  SystemdCgroup = true
[%[3]s.containerd.runtimes.%[5]s]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = ["restore.nodeshim.io/checkpoint"]
[%[3]s.containerd.runtimes.%[5]s.options]
  BinaryName = %[6]q
  SystemdCgroup = true
[%[3]s.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"
  max_conf_num = 1
`, ContainerdSocket, pauseImage, rt, runc, RuntimeClassHandler, RuntimeClassBin+"/nodeshim-runc", root, state)
}

// CNIConfig is the pods' network: the bridge plugin on cni0 with
// host-local addresses, as a simple cluster network plugin sets up.
const CNIConfig = `{
  "cniVersion": "1.0.0",
  "name": "nodeshim-node",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "10.88.0.0/16"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }, {
    "type": "loopback"
  }]
}
`

// ContainerdUnit is containerd's systemd service, as containerd ships it
// (containerd.service): the shims stay in the service's cgroup when
// containerd restarts (KillMode=process), and it may delegate.
const ContainerdUnit = `[Unit]
Description=containerd container runtime
After=local-fs.target dbus.service systemd-modules-load.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=` + NodeBin + `/containerd
Environment=PATH=` + NodeBin + `:/usr/sbin:/usr/bin:/sbin:/bin
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
`

// NodeshimUnit is nodeshim serve as a systemd service on the node, with
// its configuration from NodeshimConfig.
const NodeshimUnit = `[Unit]
Description=nodeshim node daemon
After=containerd.service
Wants=containerd.service

[Service]
ExecStart=` + NodeBin + `/nodeshim serve --root-dir ` + NodeshimRoot + ` --config-source ` + NodeshimConfig + `
Environment=PATH=` + NodeBin + `:/usr/sbin:/usr/bin:/sbin:/bin
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
`

// DenyMkdirProfile is the Localhost seccomp profile nodeshim serve
// installs on the node: every syscall allowed but mkdir and mkdirat, which
// fail with EPERM.
const DenyMkdirProfile = "nodeshim/deny-mkdir.json"

// ReporterUID is the unprivileged user (nobody) that runs `nodeshim
// reporter` on the node: a read-only peer of serve's socket.
const ReporterUID = 65534

// NodeshimConfigYAML is nodeshim's configuration on the node: the CRI
// runtime is containerd's socket, ReporterUID reads the API, checkpoints
// are enabled, and DenyMkdirProfile is a Localhost seccomp profile.
const NodeshimConfigYAML = `apiVersion: nodeshim.io/v1alpha1
kind: ShimConfiguration
containerRuntimeEndpoint: unix://` + ContainerdSocket + `
api:
  readOnlyUIDs: [65534]
checkpoint:
  enabled: true
  dir: ` + NodeshimRoot + `/checkpoints
  defaultTimeout: 5m
seccompProfiles:
  ` + DenyMkdirProfile + `: |
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}
`

// RuntimeClassConfig is nodeshim-runc's configuration on the node: runc
// by path, and nodeshim serve's checkpoint directory (NodeshimConfigYAML's),
// where its pod checkpoints are written, as the one directory a Pod may
// restore from. It names no criu: runc 1.5 has no --criu flag (it runs
// criu from PATH, /usr/sbin/criu here).
const RuntimeClassConfig = `{"runtime": "` + NodeBin + `/runc", "checkpointDir": "` + NodeshimRoot + `/checkpoints", "workDir": "` + NodeshimRoot + `/restore", "reportCache": "` + NodeshimRoot + `/report-cache"}
`

// TestsUnit runs the scenarios once containerd and nodeshim have started;
// the runner powers the node off when they end.
const TestsUnit = `[Unit]
Description=nodeshim node scenarios
After=containerd.service nodeshim.service
Wants=containerd.service nodeshim.service

[Service]
Type=oneshot
ExecStart=` + NodeLib + `/run
Environment=PATH=` + NodeBin + `:/usr/sbin:/usr/bin:/sbin:/bin
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
`

// RunnerScript is the node's runner: it says when containerd and
// nodeshim answer, runs the scenarios' test binary with its verbose output
// on the second serial port, appends the journal of containerd and
// nodeshim there, and powers the node off. timeout is go test's -timeout.
func RunnerScript(timeout string) string {
	return `#!/bin/sh
# nodeshim node scenarios: see testenv/nodevm.
M=` + vmtest.Marker + `
T=` + TimeMarker + `
say() { echo "$*" > /dev/ttyS0; }
up() { cut -d' ' -f1 /proc/uptime; }
say "$T time runner-start $(up)"
i=0
until ctr --address ` + ContainerdSocket + ` version >/dev/null 2>&1; do
	i=$((i+1))
	if [ $i -gt 1500 ]; then say "$M setup-failed containerd did not answer in 300 s"; break; fi
	sleep 0.2
done
say "$T time containerd-ready $(up)"
i=0
until [ -S ` + NodeshimRoot + `/nodeshim.sock ]; do
	i=$((i+1))
	if [ $i -gt 1500 ]; then say "$M setup-failed nodeshim serve made no socket in 300 s"; break; fi
	sleep 0.2
done
say "$T time nodeshim-ready $(up)"
cd ` + NodeLib + `
say "$M begin ` + TestName + `"
if [ -x ./` + TestBinary + ` ]; then
	NODESHIM_GUEST=node NODESHIM_REQUIRE_PRIVILEGED=1 ./` + TestBinary + ` -test.v -test.count=1 -test.timeout ` + timeout + ` > /dev/ttyS1 2>&1
	rc=$?
	say "$M end ` + TestName + ` $rc"
else
	say "$M missing ` + TestName + `"
fi
say "$T time tests-done $(up)"
{
	echo "` + JournalMarker + `"
	journalctl --no-pager -b -o short-monotonic -u containerd -u nodeshim -u kubelet | tail -n 1500
	systemctl --no-pager --failed
} > /dev/ttyS1 2>&1
sync
say "$M done"
systemctl poweroff --force --force
`
}

// InitScript is the initramfs's /init: it loads the modules of the root
// disk, mounts it and switch_roots to systemd. A failure is said on the
// console as a setup-failed marker and powers the guest off.
func InitScript(modules []string) string {
	return `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /newroot /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
fail() { echo "` + vmtest.Marker + ` setup-failed $*"; echo "` + vmtest.Marker + ` done"; poweroff -f; }
depmod || fail depmod
# A module that does not load (crc32c_intel on a CPU without SSE4.2) is
# said; the mount below fails if one it needs is missing.
for m in ` + strings.Join(modules, " ") + `; do modprobe $m || echo "modprobe $m failed"; done
i=0
while [ ! -b /dev/vda ]; do
	i=$((i+1)); [ $i -gt 300 ] && fail "no /dev/vda after 30 s"
	sleep 0.1
done
mount -t ext4 -o rw /dev/vda /newroot || fail "mount /dev/vda"
echo "` + TimeMarker + ` time switch-root $(cut -d' ' -f1 /proc/uptime)"
umount /proc /sys
mount --move /dev /newroot/dev || fail "move /dev"
exec switch_root /newroot /sbin/init
fail "switch_root"
`
}

// MaskedUnits are the units of trixie's minbase with systemd that a test
// node does not need and that cost boot time under TCG (or print a login
// prompt on the console).
func MaskedUnits() []string {
	return []string{
		"getty@tty1.service", "serial-getty@ttyS0.service", "console-getty.service",
		"apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
		"e2scrub_all.timer", "fstrim.timer", "systemd-tmpfiles-clean.timer",
		"systemd-timesyncd.service", "systemd-networkd-wait-online.service",
	}
}

// NodeFiles are the files of the node besides its packages: hostname,
// machine-id, units (enabled, and the masked ones), containerd's, CNI's,
// crictl's and nodeshim's configurations, the modules to load at boot and
// the runner. pauseImage is the sandbox image's reference.
func NodeFiles(machineID, pauseImage, testTimeout string, loadModules []string) []File {
	wants := "/etc/systemd/system/multi-user.target.wants/"
	files := []File{
		{Path: "/etc/hostname", Mode: 0o644, Data: Hostname + "\n"},
		{Path: "/etc/hosts", Mode: 0o644, Data: "127.0.0.1 localhost\n127.0.1.1 " + Hostname + "\n::1 localhost\n"},
		{Path: "/etc/machine-id", Mode: 0o444, Data: machineID + "\n"},
		{Path: "/etc/containerd/config.toml", Mode: 0o644, Data: ContainerdConfig(NodeBin+"/runc", pauseImage)},
		{Path: Containerd24Config, Mode: 0o644, Data: containerdConfig("/var/lib/containerd-2.4", "/run/containerd-2.4", NodeBin+"/runc", pauseImage)},
		{Path: "/etc/cni/net.d/10-nodeshim-node.conflist", Mode: 0o644, Data: CNIConfig},
		{Path: "/etc/crictl.yaml", Mode: 0o644, Data: "runtime-endpoint: unix://" + ContainerdSocket + "\nimage-endpoint: unix://" + ContainerdSocket + "\ntimeout: 120\n"},
		{Path: NodeshimConfig + "/config.yaml", Mode: 0o644, Data: NodeshimConfigYAML},
		{Path: RuntimeClassBin + "/nodeshim-runc.json", Mode: 0o600, Data: RuntimeClassConfig},
		{Path: "/etc/modules-load.d/nodeshim-node.conf", Mode: 0o644, Data: strings.Join(loadModules, "\n") + "\n"},
		{Path: "/etc/systemd/system/containerd.service", Mode: 0o644, Data: ContainerdUnit},
		{Path: "/etc/systemd/system/nodeshim.service", Mode: 0o644, Data: NodeshimUnit},
		{Path: "/etc/systemd/system/nodeshim-node-tests.service", Mode: 0o644, Data: TestsUnit},
		{Path: wants + "containerd.service", Link: "/etc/systemd/system/containerd.service"},
		{Path: wants + "nodeshim.service", Link: "/etc/systemd/system/nodeshim.service"},
		{Path: wants + "nodeshim-node-tests.service", Link: "/etc/systemd/system/nodeshim-node-tests.service"},
		{Path: "/etc/systemd/system/default.target", Link: "/usr/lib/systemd/system/multi-user.target"},
		{Path: NodeLib + "/run", Mode: 0o755, Data: RunnerScript(testTimeout)},
	}
	for _, u := range MaskedUnits() {
		files = append(files, File{Path: "/etc/systemd/system/" + u, Link: "/dev/null"})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}
