package nodevm

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// The node's network: QEMU's user-mode network (slirp) with restrict=on,
// so that no packet of the node leaves the machine; the one way out is
// the API server's address, forwarded by QEMU (guestfwd) to the host's
// 127.0.0.1.
const (
	// NodeIP is the node's address on its one interface (eth0).
	NodeIP = "10.0.2.15"
	// NodeNet is the user-mode network.
	NodeNet = "10.0.2.0/24"
	// Gateway is QEMU's gateway (the host) on NodeNet.
	Gateway = "10.0.2.2"
	// APIServerAddress is the API server's address as the node reaches it;
	// its serving certificate names it.
	APIServerAddress = "10.0.2.100"
	// APIServerPort is the API server's port at APIServerAddress.
	APIServerPort = 6443
)

// Paths of the node's Kubernetes files.
const (
	// KubeletKubeconfig authenticates kubelet as system:node:Hostname.
	KubeletKubeconfig = "/etc/kubernetes/kubelet.conf"
	// AdminKubeconfig is the scenarios' admin kubeconfig.
	AdminKubeconfig = "/etc/kubernetes/admin.conf"
	// KubeletConfig is kubelet's KubeletConfiguration.
	KubeletConfig = "/var/lib/kubelet/config.yaml"
	// KubeletUnitName is kubelet's systemd service, which the kubelet
	// scenario starts and stops: a running kubelet kills every pod of the
	// runtime that the API server does not list, the CRI scenarios' too.
	KubeletUnitName = "kubelet.service"
)

// Kube is the control plane on the host that the node joins, and the
// kubelet it runs.
type Kube struct {
	// Kubelet is the kubelet binary for the node.
	Kubelet string
	// HostPort is the API server's port on the host's 127.0.0.1.
	HostPort int
	// CA is the API server's serving certificate (PEM), which the node's
	// kubeconfigs trust.
	CA []byte
	// NodeToken authenticates as system:node:Hostname in system:nodes;
	// AdminToken as an admin, for the scenarios.
	NodeToken, AdminToken string
}

// NodeUser is kubelet's user name, as the Node authorizer wants it.
const NodeUser = "system:node:" + Hostname

// NetArgs are QEMU's arguments for the node's network: a virtio NIC on
// slirp with restrict=on and one guestfwd from APIServerAddress:
// APIServerPort to hostPort on the host's loopback, through a
// `busybox nc` that QEMU spawns for each connection.
func NetArgs(busybox string, hostPort int) []string {
	fwd := fmt.Sprintf("guestfwd=tcp:%s:%d-cmd:%s nc 127.0.0.1 %d", APIServerAddress, APIServerPort,
		strings.ReplaceAll(busybox, ",", ",,"), hostPort)
	return []string{"-nic", "user,model=virtio-net-pci,restrict=on,net=" + NodeNet + ",host=" + Gateway + "," + fwd}
}

// Kubeconfig is a kubeconfig for the API server at APIServerAddress,
// trusting ca, with token as user.
func Kubeconfig(user, token string, ca []byte) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: host
  cluster:
    server: https://` + APIServerAddress + `:` + strconv.Itoa(APIServerPort) + `
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString(ca) + `
users:
- name: ` + user + `
  user:
    token: ` + token + `
contexts:
- name: host
  context:
    cluster: host
    user: ` + user + `
current-context: host
`
}

// KubeletConfigYAML is kubelet's configuration on the node: the systemd
// cgroup driver, containerd's socket, swap tolerated, no anonymous or
// webhook authentication of its own API (the API server does not reach
// it), no cluster DNS, and eviction thresholds for a 4 GiB disk.
// Every other field is kubelet's default, failCgroupV1 and
// singleProcessOOMKill included: an OOM kill takes the whole container
// (memory.oom.group, kubelet's default on cgroup v2 since 1.32), whose
// cgroup is gone before nodeshim could look it up, and which containerd
// often reports exited "Error", not "OOMKilled"; nodeshim names it by the
// cgroup's name the kernel gave at the kill.
const KubeletConfigYAML = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix://` + ContainerdSocket + `
failSwapOn: false
resolvConf: ""
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
`

// KubeletUnit is kubelet's systemd service, as kubeadm's packages make it,
// with the node's address given (the node has no default route to find
// it from).
const KubeletUnit = `[Unit]
Description=kubelet: the Kubernetes node agent
After=containerd.service node-network.service
Wants=containerd.service node-network.service

[Service]
ExecStart=` + NodeBin + `/kubelet --config=` + KubeletConfig + ` --kubeconfig=` + KubeletKubeconfig + ` --hostname-override=` + Hostname + ` --node-ip=` + NodeIP + ` --v=1
Environment=PATH=` + NodeBin + `:/usr/sbin:/usr/bin:/sbin:/bin
Restart=always
RestartSec=5
`

// NetworkUnit configures eth0 with NodeIP (no DHCP: the network is
// restricted). systemd expands $ in ExecStart: the shell's are $$.
const NetworkUnit = `[Unit]
Description=the node's network (QEMU user-mode)
After=systemd-modules-load.service
Before=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'modprobe virtio_net; i=0; until [ -e /sys/class/net/eth0 ]; do i=$$((i+1)); [ $$i -gt 300 ] && exit 1; sleep 0.1; done; ip link set lo up && ip link set eth0 up && ip addr add ` + NodeIP + `/24 dev eth0 && ip route add default via ` + Gateway + `'

[Install]
WantedBy=multi-user.target
`

// KubeFiles are the node's files for kubelet: its unit, configuration and
// kubeconfig, the admin kubeconfig, and the network unit, enabled.
func KubeFiles(k Kube) []File {
	return []File{
		{Path: "/etc/systemd/system/" + KubeletUnitName, Mode: 0o644, Data: KubeletUnit},
		{Path: "/etc/systemd/system/node-network.service", Mode: 0o644, Data: NetworkUnit},
		{Path: "/etc/systemd/system/multi-user.target.wants/node-network.service", Link: "/etc/systemd/system/node-network.service"},
		{Path: KubeletConfig, Mode: 0o644, Data: KubeletConfigYAML},
		{Path: KubeletKubeconfig, Mode: 0o600, Data: Kubeconfig(NodeUser, k.NodeToken, k.CA)},
		{Path: AdminKubeconfig, Mode: 0o600, Data: Kubeconfig("admin", k.AdminToken, k.CA)},
	}
}
