package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/config"
)

// effectiveFlags are the flags of `nodeshim seccomp effective`.
type effectiveFlags struct {
	namespace, pod  string
	runtimeEndpoint string
	kubeletRootDir  string
	output          string
}

// containerEffective is what `seccomp effective` reports of one container.
type containerEffective struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	State string `json:"state"`
	// Effective is the profile by kubelet's rules; empty when Error says
	// why there is none.
	Effective *seccomp.Effective `json:"effective,omitempty"`
	// RuntimeFilter says whether the OCI spec the runtime made for the
	// container carries a seccomp filter: "yes", "no", or "unknown" when
	// the runtime gives no spec.
	RuntimeFilter string `json:"runtimeFilter"`
	Error         string `json:"error,omitempty"`
}

// podEffective is the document `seccomp effective -o json` prints.
type podEffective struct {
	Namespace  string               `json:"namespace"`
	Pod        string               `json:"pod"`
	SandboxID  string               `json:"sandboxID"`
	Containers []containerEffective `json:"containers"`
}

func newSeccompEffectiveCommand() *cobra.Command {
	var f effectiveFlags
	cmd := &cobra.Command{
		Use:   "effective --pod POD [--namespace NS]",
		Short: "Show the seccomp profile each container of a pod runs under",
		Long: `Ask the node's CRI runtime for a pod's sandbox and containers and show, per
container, the seccomp profile it runs under by kubelet's rules: a
privileged container runs Unconfined; otherwise the container's own
seccompProfile wins, an unset one inherits the pod's (kubelet passes the
pod-level profile to the sandbox and copies it into each container that has
none, so a container whose profile is the sandbox's is shown as inheriting
it), and with neither the runtime's default applies, which is Unconfined
(kubelet's seccompDefault, when on, has already asked for RuntimeDefault).

A Localhost profile is named relative to <kubelet root-dir>/seccomp; one
whose file lies outside that root, or is missing, is an error for that
container. RUNTIME says whether the OCI spec that the runtime made for the
container carries a seccomp filter, so that the rules can be checked
against what was done.

Exit code 3 when any container's profile is in error.`,
		Example: `  # The containers of pod web-0 in namespace shop
  nodeshim seccomp effective --namespace shop --pod web-0

  # As JSON, against CRI-O
  nodeshim seccomp effective --pod web-0 --runtime-endpoint unix:///run/crio/crio.sock -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSeccompEffective(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.namespace, "namespace", "default", "the pod's namespace")
	fl.StringVar(&f.pod, "pod", "", "the pod's name (required)")
	fl.StringVar(&f.runtimeEndpoint, "runtime-endpoint", config.Defaults().ContainerRuntimeEndpoint, "the CRI runtime's socket (ShimConfiguration containerRuntimeEndpoint)")
	fl.StringVar(&f.kubeletRootDir, "kubelet-root-dir", config.Defaults().KubeletRootDir, "kubelet's --root-dir; Localhost profiles are under its seccomp directory")
	addOutputFlag(cmd, &f.output)
	return cmd
}

func runSeccompEffective(cmd *cobra.Command, f *effectiveFlags) error {
	if f.pod == "" || f.namespace == "" {
		return withExitCode(exitUsage, errors.New("--pod and --namespace are required"))
	}
	r, err := cri.Dial(f.runtimeEndpoint)
	if err != nil {
		return err
	}
	defer r.Close()
	ps, err := r.PodSecurity(cmd.Context(), f.namespace, f.pod)
	if err != nil {
		return err
	}
	root := filepath.Join(f.kubeletRootDir, "seccomp")
	doc := podEffective{Namespace: f.namespace, Pod: f.pod, SandboxID: ps.SandboxID, Containers: []containerEffective{}}
	problems := 0
	for _, c := range ps.Containers {
		ce := containerEffective{Name: c.Name, ID: c.ID, State: c.State, RuntimeFilter: "unknown"}
		if c.Spec != nil {
			ce.RuntimeFilter = "no"
			if c.Spec.Linux != nil && c.Spec.Linux.Seccomp != nil {
				ce.RuntimeFilter = "yes"
			}
		}
		eff, err := effectiveFromCRI(ps.Seccomp, c, root)
		if err != nil {
			ce.Error = err.Error()
			problems++
		} else {
			ce.Effective = &eff
		}
		doc.Containers = append(doc.Containers, ce)
	}
	if err := writeOutput(cmd.OutOrStdout(), f.output, doc, func() string { return effectiveTable(doc) }); err != nil {
		return err
	}
	if problems > 0 {
		return withExitCode(exitProblem, fmt.Errorf("%d container(s) of %s/%s have a seccomp profile in error", problems, f.namespace, f.pod))
	}
	return nil
}

// effectiveFromCRI applies kubelet's rules (seccomp.EffectiveProfile) to
// what CRI reports: the sandbox's profile as the pod's, the container's
// own unless it is the sandbox's (kubelet copied it), and the container's
// privileged flag. A Localhost profile whose file is missing is an error:
// the runtime refuses to create a container with it.
func effectiveFromCRI(sandbox *runtimeapi.SecurityProfile, c cri.ContainerSecurity, root string) (seccomp.Effective, error) {
	pod := &corev1.PodSecurityContext{SeccompProfile: k8sProfile(sandbox, root)}
	ctr := &corev1.SecurityContext{Privileged: &c.Privileged}
	if !sameProfile(c.Seccomp, sandbox) {
		ctr.SeccompProfile = k8sProfile(c.Seccomp, root)
	}
	eff, err := seccomp.EffectiveProfile(pod, ctr, seccomp.KubeletOptions{SeccompRoot: root})
	if err != nil {
		return seccomp.Effective{}, err
	}
	if eff.Type == corev1.SeccompProfileTypeLocalhost {
		if _, err := os.Stat(eff.Path); err != nil {
			return eff, fmt.Errorf("%s seccompProfile: Localhost profile %s: %w", eff.Source, eff.LocalhostProfile, err)
		}
	}
	return eff, nil
}

// k8sProfile turns a CRI profile back into the pod spec's form: a Localhost
// reference (an absolute path, as kubelet passes it) relative to root, or
// left absolute when it is not under root, which EffectiveProfile refuses.
func k8sProfile(p *runtimeapi.SecurityProfile, root string) *corev1.SeccompProfile {
	if p == nil {
		return nil
	}
	switch p.ProfileType {
	case runtimeapi.SecurityProfile_RuntimeDefault:
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	case runtimeapi.SecurityProfile_Unconfined:
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	}
	name := p.LocalhostRef
	if rel, err := filepath.Rel(root, name); err == nil && filepath.IsAbs(name) && rel != ".." && !strings.HasPrefix(rel, "../") {
		name = rel
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
}

func sameProfile(a, b *runtimeapi.SecurityProfile) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ProfileType == b.ProfileType && a.LocalhostRef == b.LocalhostRef
}

func effectiveTable(doc podEffective) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tSTATE\tPROFILE\tLOCALHOST\tSOURCE\tRUNTIME\tERROR")
	for _, c := range doc.Containers {
		profile, localhost, source := "-", "-", "-"
		if e := c.Effective; e != nil {
			profile, source = string(e.Type), e.Source
			if e.LocalhostProfile != "" {
				localhost = e.LocalhostProfile
			}
		}
		errText := c.Error
		if errText == "" {
			errText = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, strings.TrimPrefix(c.State, "CONTAINER_"), profile, localhost, source, c.RuntimeFilter, errText)
	}
	tw.Flush()
	return b.String()
}
