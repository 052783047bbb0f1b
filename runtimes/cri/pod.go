package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSecurity is what the CRI runtime reports of a pod's seccomp settings:
// the sandbox's (kubelet passes the pod-level seccompProfile there) and each
// container's, as kubelet resolved them into the CRI configs.
type PodSecurity struct {
	// SandboxID is the runtime's id of the pod's sandbox.
	SandboxID string
	// Seccomp is the sandbox's profile, nil when unset.
	Seccomp *runtimeapi.SecurityProfile
	// Containers are the pod's containers, the most recent attempt of
	// each name, sorted by name.
	Containers []ContainerSecurity
}

// ContainerSecurity is a container's privileged flag and seccomp profile
// from its CRI config, and the OCI spec the runtime made of it.
type ContainerSecurity struct {
	ID, Name string
	// State is the CRI state, e.g. CONTAINER_RUNNING.
	State      string
	Privileged bool
	// Seccomp is nil when the config sets no profile.
	Seccomp *runtimeapi.SecurityProfile
	// Spec is the OCI runtime spec from the verbose info, nil when the
	// runtime gives none.
	Spec *specs.Spec
}

// verboseSecurity is the part of containerd's verbose info ("info" JSON,
// its "config" member: the CRI config as encoding/json writes it) that
// holds the security context of a sandbox or a container.
type verboseSecurity struct {
	Config *struct {
		Linux *struct {
			SecurityContext *struct {
				Privileged bool `json:"privileged"`
				Seccomp    *struct {
					// 0, RuntimeDefault, is omitted by omitempty.
					ProfileType  runtimeapi.SecurityProfile_ProfileType `json:"profile_type"`
					LocalhostRef string                                 `json:"localhost_ref"`
				} `json:"seccomp"`
			} `json:"security_context"`
		} `json:"linux"`
	} `json:"config"`
}

// SecurityFromVerboseInfo reads the privileged flag and the seccomp profile
// of the CRI config in a ContainerStatus or PodSandboxStatus verbose info,
// as containerd returns it. ok is false when the info holds no config
// (CRI-O keeps it out).
func SecurityFromVerboseInfo(info map[string]string) (privileged bool, seccomp *runtimeapi.SecurityProfile, ok bool, err error) {
	raw, found := info["info"]
	if !found {
		return false, nil, false, nil
	}
	var v verboseSecurity
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return false, nil, false, fmt.Errorf("decode verbose info: %w", err)
	}
	if v.Config == nil {
		return false, nil, false, nil
	}
	if v.Config.Linux == nil || v.Config.Linux.SecurityContext == nil {
		return false, nil, true, nil
	}
	sc := v.Config.Linux.SecurityContext
	if sc.Seccomp != nil {
		seccomp = &runtimeapi.SecurityProfile{ProfileType: sc.Seccomp.ProfileType, LocalhostRef: sc.Seccomp.LocalhostRef}
	}
	return sc.Privileged, seccomp, true, nil
}

// PodSecurity returns the seccomp settings of the pod namespace/name as the
// runtime reports them: its ready sandbox (the most recent one) and every
// container in it, whatever its state.
func (r *RuntimeResolver) PodSecurity(ctx context.Context, namespace, name string) (PodSecurity, error) {
	pod := namespace + "/" + name
	sandboxes, err := r.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{LabelPodNamespace: namespace, LabelPodName: name},
	}})
	if err != nil {
		return PodSecurity{}, fmt.Errorf("list pod sandboxes for %s: %w", pod, err)
	}
	var best *runtimeapi.PodSandbox
	for _, s := range sandboxes.Items {
		if s.State != runtimeapi.PodSandboxState_SANDBOX_READY || s.Labels[LabelPodNamespace] != namespace || s.Labels[LabelPodName] != name {
			continue
		}
		if best == nil || s.CreatedAt > best.CreatedAt {
			best = s
		}
	}
	if best == nil {
		return PodSecurity{}, fmt.Errorf("pod %s: %w", pod, ErrNotFound)
	}
	st, err := r.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: best.Id, Verbose: true})
	if err != nil {
		return PodSecurity{}, fmt.Errorf("pod sandbox status of %s (%s): %w", pod, best.Id, err)
	}
	out := PodSecurity{SandboxID: best.Id}
	if _, out.Seccomp, _, err = SecurityFromVerboseInfo(st.Info); err != nil {
		return PodSecurity{}, fmt.Errorf("pod %s (%s): %w", pod, best.Id, err)
	}

	list, err := r.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: best.Id}})
	if err != nil {
		return PodSecurity{}, fmt.Errorf("list containers of %s: %w", pod, err)
	}
	latest := map[string]*runtimeapi.Container{}
	for _, c := range list.Containers {
		n := c.Labels[LabelContainerName]
		if c.PodSandboxId != best.Id || n == "" {
			continue
		}
		if prev := latest[n]; prev == nil || c.CreatedAt > prev.CreatedAt {
			latest[n] = c
		}
	}
	for n, c := range latest {
		cst, err := r.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
		if err != nil {
			return PodSecurity{}, fmt.Errorf("container status of %s/%s (%s): %w", pod, n, c.Id, err)
		}
		cs := ContainerSecurity{ID: c.Id, Name: n, State: c.State.String()}
		var ok bool
		if cs.Privileged, cs.Seccomp, ok, err = SecurityFromVerboseInfo(cst.Info); err != nil {
			return PodSecurity{}, fmt.Errorf("container %s/%s (%s): %w", pod, n, c.Id, err)
		}
		if !ok {
			return PodSecurity{}, fmt.Errorf("container %s/%s (%s): the runtime's verbose info has no CRI config", pod, n, c.Id)
		}
		if cs.Spec, err = SpecFromVerboseInfo(cst.Info); err != nil {
			return PodSecurity{}, fmt.Errorf("container %s/%s (%s): %w", pod, n, c.Id, err)
		}
		out.Containers = append(out.Containers, cs)
	}
	slices.SortFunc(out.Containers, func(a, b ContainerSecurity) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
