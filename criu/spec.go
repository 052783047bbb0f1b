package criu

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// ExtMount is one of CRIU's external mount mappings (CriuOpts.ext_mnt,
// `--external mnt[KEY]:VAL`). On dump KEY is the mount point inside the
// container and VAL the name the image records for it; on restore the
// runtime maps each recorded name to a host path again.
type ExtMount struct {
	Key string `json:"key"`
	Val string `json:"val"`
}

// The keys runc gives the namespaces it declares external
// (libcontainer's criuNsToKey: "extRoot" + Title(nsName) + "NS"); runc
// restore hands the new namespaces to CRIU under the same keys.
const (
	ExtNetNSKey = "extRootNetNS"
	ExtPidNSKey = "extRootPidNS"
)

// DescriptorsFile is runc's record of the init process's stdio
// (libcontainer's descriptorsFilename) in the images directory: runc
// restore reads it to reconnect the pipes the runtime passes.
const DescriptorsFile = "descriptors.json"

// runcDefaultDevices are the device nodes runc creates in every container
// besides the spec's (libcontainer/specconv AllowedDevices with a path);
// runc declares each one an external mount on dump and restore.
var runcDefaultDevices = []string{"/dev/null", "/dev/random", "/dev/full", "/dev/tty", "/dev/zero", "/dev/urandom"}

// ContainerState is what the kernel shows of a running container that its
// OCI spec alone does not say.
type ContainerState struct {
	// Mounts is the container's mount table as its init process sees it
	// (/proc/PID/mountinfo).
	Mounts []mountinfo.Entry
	// Namespaces maps a namespace type of the spec to the inode of the
	// init process's namespace of that type (/proc/PID/ns/*).
	Namespaces map[specs.LinuxNamespaceType]uint64
	// MaskedFiles are the spec's masked paths that exist in the container
	// and are not directories: runc masks those by bind-mounting /dev/null.
	MaskedFiles []string
	// FreezerCgroup is the host path of the container's freezer cgroup
	// (cgroup v1 freezer, or the cgroup v2 directory), empty if unknown.
	FreezerCgroup string
	// Stdio is what fds 0, 1 and 2 of the init process point to
	// (readlink /proc/PID/fd/N), as runc records them.
	Stdio []string
}

// ContainerOptionsFromSpec returns the CRIU options runc passes to dump the
// container described by spec and st: the root, every bind mount (and each
// cgroup v1 controller mount runc binds from the host) as an external
// mount under its own destination, masked files as external mounts named
// /dev/null, the device nodes, and network and PID namespaces that the
// spec joins (a pod's or the host's) as external namespaces. bundle is the
// directory a relative root path is relative to.
func ContainerOptionsFromSpec(spec *specs.Spec, bundle string, st ContainerState) (ContainerOptions, error) {
	if spec == nil || spec.Root == nil || spec.Root.Path == "" {
		return ContainerOptions{}, fmt.Errorf("OCI spec has no root path")
	}
	root := spec.Root.Path
	if !filepath.IsAbs(root) {
		if bundle == "" {
			return ContainerOptions{}, fmt.Errorf("OCI spec root %q is relative and the bundle is unknown", root)
		}
		root = filepath.Join(bundle, root)
	}
	o := ContainerOptions{
		Root:            filepath.Clean(root),
		ManageCgroups:   true,
		FreezeCgroup:    st.FreezerCgroup,
		OrphanPtsMaster: true,
		Descriptors:     st.Stdio,
	}
	seen := map[string]bool{}
	add := func(key, val string) {
		if !seen[key] {
			seen[key] = true
			o.ExtMounts = append(o.ExtMounts, ExtMount{Key: key, Val: val})
		}
	}
	var cgroupNS bool
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == specs.CgroupNamespace {
				cgroupNS = true
			}
		}
	}
	for _, m := range spec.Mounts {
		dest := cleanDest(m.Destination)
		switch {
		case isBind(m):
			add(dest, dest)
		case m.Type == "cgroup" && !cgroupNS:
			// Without a cgroup namespace runc mounts a tmpfs at the
			// destination and binds each cgroup v1 hierarchy of the
			// host below it; with cgroup v2 it is a real mount that
			// CRIU dumps itself. The container's own mount table says
			// which it did.
			for _, e := range st.Mounts {
				if e.FSType == "cgroup" && strings.HasPrefix(e.Point, dest+"/") {
					add(e.Point, e.Point)
				}
			}
		}
	}
	for _, p := range st.MaskedFiles {
		add(cleanDest(p), "/dev/null")
	}
	var devs []string
	devs = append(devs, runcDefaultDevices...)
	if spec.Linux != nil {
		for _, d := range spec.Linux.Devices {
			devs = append(devs, d.Path)
		}
	}
	for _, d := range devs {
		d = cleanDest(d)
		add(d, d)
	}
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			var key string
			switch ns.Type {
			case specs.NetworkNamespace:
				key = ExtNetNSKey
			case specs.PIDNamespace:
				key = ExtPidNSKey
			default:
				continue
			}
			if ns.Path == "" {
				// The container's own namespace: CRIU dumps it.
				continue
			}
			ino, ok := st.Namespaces[ns.Type]
			if !ok || ino == 0 {
				return ContainerOptions{}, fmt.Errorf("OCI spec joins the %s namespace %s, but the container's inode of it is unknown", ns.Type, ns.Path)
			}
			o.External = append(o.External, fmt.Sprintf("%s[%d]:%s", criuNSName(ns.Type), ino, key))
		}
	}
	return o, nil
}

// criuNSName is CRIU's name of a namespace type in --external.
func criuNSName(t specs.LinuxNamespaceType) string {
	switch t {
	case specs.NetworkNamespace:
		return "net"
	case specs.PIDNamespace:
		return "pid"
	}
	return string(t)
}

// isBind says whether runc treats m as a bind mount: its options hold
// "bind" or "rbind", or its type is "bind".
func isBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// cleanDest makes a mount destination absolute and clean, as the key CRIU
// matches against the container's mount points.
func cleanDest(p string) string {
	return path.Clean("/" + p)
}
