package kubectl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/drain"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
)

// FieldManager is the field manager of the plugin's writes.
const FieldManager = "kubectl-nodeshim"

// AnnotationCheckpoint is the pod annotation through which the restoring
// RuntimeClass finds a container's checkpoint (runtimes/restoring's).
const AnnotationCheckpoint = "restore.nodeshim.io/checkpoint"

// DefaultRuntimeClass is the RuntimeClass that deploy/'s runtimeclass
// component installs.
const DefaultRuntimeClass = "nodeshim"

// Env is where a command runs: its output streams and, for tests, the
// client configuration and clock.
type Env struct {
	Stdout, Stderr io.Writer
	// Config, when set, replaces the kubeconfig's client configuration;
	// Namespace is then the default namespace.
	Config    *rest.Config
	Namespace string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Poll is how often a wait reads the object again; zero means 500 ms.
	Poll time.Duration
}

// errUsage marks a usage error (exit code 2).
var errUsage = errors.New("usage")

// IsUsage says whether err is a usage error.
func IsUsage(err error) bool { return errors.Is(err, errUsage) }

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

const usage = `kubectl nodeshim: checkpoints of pods, taken and restored by nodeshim on their nodes

  kubectl nodeshim checkpoint POD [-n NS] [--name NAME] [--image REPO] [--timeout 1m] [--wait=true]
  kubectl nodeshim get [NAME] [-n NS]
  kubectl nodeshim restore NAME [-n NS] [--pod NEWPOD] [--runtime-class nodeshim] [--wait=true]
  kubectl nodeshim delete NAME [-n NS]
  kubectl nodeshim migrate POD (--to NODE | --selector K=V,...) [-n NS] [--name NAME] [--mode StopAndCopy] [--delete-original] [--wait=true]
  kubectl nodeshim drain NODE [--timeout 10m]
`

// Run runs the plugin with args (without the program name).
func Run(ctx context.Context, args []string, env Env) error {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Poll <= 0 {
		env.Poll = 500 * time.Millisecond
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(env.Stdout, usage)
		if len(args) == 0 {
			return usagef("no command")
		}
		return nil
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet("kubectl nodeshim "+cmd, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	ns := fs.String("namespace", "", "the namespace (default: the kubeconfig context's)")
	fs.StringVar(ns, "n", "", "the namespace (short)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	var (
		name, image, pod, runtimeClass string
		to, selector, mode             string
		timeout                        time.Duration
		wait, deleteOriginal           bool
	)
	switch cmd {
	case "checkpoint":
		fs.StringVar(&name, "name", "", "the PodCheckpoint's name (default POD-<time>)")
		fs.StringVar(&image, "image", "", "also build one checkpoint image per container, named from this repository")
		fs.DurationVar(&timeout, "timeout", 0, "bound of the checkpoint on the node (default: the node's)")
		fs.BoolVar(&wait, "wait", true, "wait until the checkpoint is stored or failed, printing its progress")
	case "restore":
		fs.StringVar(&pod, "pod", "", "the new Pod's name (default NAME-restored)")
		fs.StringVar(&runtimeClass, "runtime-class", DefaultRuntimeClass, "the restoring RuntimeClass")
		fs.BoolVar(&wait, "wait", true, "wait until the new Pod runs")
	case "migrate":
		fs.StringVar(&name, "name", "", "the PodMigration's name (default POD-move-<time>)")
		fs.StringVar(&to, "to", "", "the node to move the pod to")
		fs.StringVar(&selector, "selector", "", "the labels (K=V,...) of the nodes to choose the target among, instead of --to")
		fs.StringVar(&mode, "mode", string(v1alpha1.ModeStopAndCopy), "how the memory moves: StopAndCopy, PreCopy or Lazy")
		fs.BoolVar(&deleteOriginal, "delete-original", false, "delete the original pod once the moved one runs")
		fs.BoolVar(&wait, "wait", true, "wait until the pod runs on the target or the migration failed, printing its progress")
	case "drain":
		fs.DurationVar(&timeout, "timeout", 10*time.Minute, "how long the pods may take to move or go")
	case "get", "delete":
	default:
		fmt.Fprint(env.Stderr, usage)
		return usagef("unknown command %q", cmd)
	}
	if err := fs.Parse(interleaved(rest)); err != nil {
		return usagef("%v", err)
	}
	c, namespace, err := connect(env, *kubeconfig, *ns)
	if err != nil {
		return err
	}
	pos := fs.Args()
	switch cmd {
	case "checkpoint":
		if len(pos) != 1 {
			return usagef("checkpoint takes one POD, got %d arguments", len(pos))
		}
		return checkpoint(ctx, c, env, namespace, pos[0], name, image, timeout, wait)
	case "get":
		if len(pos) > 1 {
			return usagef("get takes at most one NAME")
		}
		return get(ctx, c, env, namespace, pos)
	case "restore":
		if len(pos) != 1 {
			return usagef("restore takes one NAME, got %d arguments", len(pos))
		}
		return restore(ctx, c, env, namespace, pos[0], pod, runtimeClass, wait)
	case "migrate":
		if len(pos) != 1 {
			return usagef("migrate takes one POD, got %d arguments", len(pos))
		}
		spec, err := migrationSpec(pos[0], to, selector, mode, deleteOriginal)
		if err != nil {
			return err
		}
		return migrate(ctx, c, env, namespace, name, spec, wait)
	case "drain":
		if len(pos) != 1 {
			return usagef("drain takes one NODE, got %d arguments", len(pos))
		}
		if timeout <= 0 {
			return usagef("--timeout %v: want a positive duration", timeout)
		}
		dctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := drain.Run(dctx, drain.Options{Node: pos[0], API: c, FieldManager: FieldManager, Out: env.Stdout, Poll: env.Poll, Now: env.Now})
		return err
	default: // delete
		if len(pos) != 1 {
			return usagef("delete takes one NAME, got %d arguments", len(pos))
		}
		if err := c.DeletePodCheckpoint(ctx, namespace, pos[0]); err != nil {
			return fmt.Errorf("delete PodCheckpoint %s/%s: %w", namespace, pos[0], err)
		}
		fmt.Fprintf(env.Stdout, "podcheckpoint.nodeshim.io/%s deleted (its node removes the checkpoint)\n", pos[0])
		return nil
	}
}

// interleaved moves the flags of args before its positional arguments,
// as kubectl accepts them in any order ("checkpoint web -n prod").
func interleaved(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			return append(flags, pos...)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			// A flag given as "-n NS" takes the next word, unless it is
			// a boolean or says "=".
			if !strings.Contains(a, "=") && !isBool(a) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

func isBool(flag string) bool {
	name := strings.TrimLeft(flag, "-")
	return name == "wait" || name == "delete-original" || name == "h" || name == "help"
}

// connect returns a client for the kubeconfig (or env.Config) and the
// namespace to use.
func connect(env Env, kubeconfig, ns string) (*kubeapi.Client, string, error) {
	cfg, namespace := env.Config, env.Namespace
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if kubeconfig != "" {
			rules.ExplicitPath = kubeconfig
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
		var err error
		if cfg, err = cc.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("kubeconfig: %w", err)
		}
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
		}
	}
	if ns != "" {
		namespace = ns
	}
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, "", usagef("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	c, err := kubeapi.ForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	return c, namespace, nil
}

// checkpoint creates a PodCheckpoint of pod and, with wait, follows it to
// its end.
func checkpoint(ctx context.Context, c *kubeapi.Client, env Env, ns, pod, name, image string, timeout time.Duration, wait bool) error {
	if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		return usagef("pod %q: %s", pod, strings.Join(errs, "; "))
	}
	if name == "" {
		name = fmt.Sprintf("%s-%d", pod, env.Now().Unix())
		if len(name) > validation.DNS1123SubdomainMaxLength {
			name = name[len(name)-validation.DNS1123SubdomainMaxLength:]
		}
	}
	pc := &v1alpha1.PodCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.PodCheckpointSpec{PodName: pod, Image: image},
	}
	if timeout > 0 {
		pc.Spec.Timeout = &metav1.Duration{Duration: timeout}
	}
	if _, err := c.CreatePodCheckpoint(ctx, pc, FieldManager); err != nil {
		return fmt.Errorf("create PodCheckpoint %s/%s of pod %s: %w", ns, name, pod, err)
	}
	fmt.Fprintf(env.Stdout, "podcheckpoint.nodeshim.io/%s created\n", name)
	if !wait {
		return nil
	}
	final, err := follow(ctx, c, env, ns, name)
	if err != nil {
		return err
	}
	if final.Status.Phase == v1alpha1.PhaseFailed {
		return fmt.Errorf("PodCheckpoint %s/%s failed: %s", ns, name, message(final, v1alpha1.ConditionStored))
	}
	return nil
}

// follow prints each phase of ns/name until it is Stored or Failed.
func follow(ctx context.Context, c *kubeapi.Client, env Env, ns, name string) (*v1alpha1.PodCheckpoint, error) {
	var last v1alpha1.Phase = "-"
	for {
		pc, err := c.GetPodCheckpoint(ctx, ns, name)
		if err != nil {
			return nil, fmt.Errorf("read PodCheckpoint %s/%s: %w", ns, name, err)
		}
		if pc.Status.Phase != last {
			last = pc.Status.Phase
			fmt.Fprintf(env.Stdout, "%s\t%s\n", phaseName(last), describe(pc))
		}
		if last == v1alpha1.PhaseStored || last == v1alpha1.PhaseFailed {
			return pc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for PodCheckpoint %s/%s (%s): %w", ns, name, phaseName(last), ctx.Err())
		case <-time.After(env.Poll):
		}
	}
}

func phaseName(p v1alpha1.Phase) string {
	if p == v1alpha1.PhasePending {
		return "Pending"
	}
	return string(p)
}

// describe is one line about pc's state.
func describe(pc *v1alpha1.PodCheckpoint) string {
	switch pc.Status.Phase {
	case v1alpha1.PhasePending:
		return "waiting for the node of pod " + pc.Spec.PodName
	case v1alpha1.PhaseAccepted:
		return "node " + pc.Status.NodeName + ": " + message(pc, v1alpha1.ConditionStored)
	case v1alpha1.PhaseStored:
		return "node " + pc.Status.NodeName + ": " + filepath.Base(pc.Status.Location)
	default:
		return message(pc, v1alpha1.ConditionStored)
	}
}

func message(pc *v1alpha1.PodCheckpoint, typ string) string {
	for _, c := range pc.Status.Conditions {
		if c.Type == typ {
			if c.Message != "" {
				return c.Message
			}
			return c.Reason
		}
	}
	return ""
}

// get prints the PodCheckpoints of ns, or the one named.
func get(ctx context.Context, c *kubeapi.Client, env Env, ns string, names []string) error {
	var items []v1alpha1.PodCheckpoint
	if len(names) == 1 {
		pc, err := c.GetPodCheckpoint(ctx, ns, names[0])
		if err != nil {
			return fmt.Errorf("read PodCheckpoint %s/%s: %w", ns, names[0], err)
		}
		items = append(items, *pc)
	} else {
		l, err := c.ListPodCheckpointsIn(ctx, ns, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list PodCheckpoints in %s: %w", ns, err)
		}
		items = l.Items
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPOD\tNODE\tPHASE\tREADY\tCHECKPOINT\tAGE")
	for _, pc := range items {
		ready := "Unknown"
		for _, c := range pc.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady {
				ready = string(c.Status)
			}
		}
		age := env.Now().Sub(pc.CreationTimestamp.Time).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pc.Name, pc.Spec.PodName, dash(pc.Status.NodeName), phaseName(pc.Status.Phase),
			ready, dash(filepath.Base(pc.Status.Location)), age)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" || s == "." {
		return "-"
	}
	return s
}

// restore creates a Pod from the Stored checkpoint name: the pod as
// checkpointed, on the checkpoint's node, under runtimeClass, naming the
// checkpoint in its annotation.
func restore(ctx context.Context, c *kubeapi.Client, env Env, ns, name, podName, runtimeClass string, wait bool) error {
	pc, err := c.GetPodCheckpoint(ctx, ns, name)
	if err != nil {
		return fmt.Errorf("read PodCheckpoint %s/%s: %w", ns, name, err)
	}
	if pc.Status.Phase != v1alpha1.PhaseStored || pc.Status.Pod == nil || pc.Status.Location == "" {
		return fmt.Errorf("PodCheckpoint %s/%s is %s, not Stored: nothing to restore", ns, name, phaseName(pc.Status.Phase))
	}
	if podName == "" {
		podName = name + "-restored"
	}
	p := NewPod(pc, podName, runtimeClass)
	created, err := c.CreatePod(ctx, p, FieldManager)
	if err != nil {
		return fmt.Errorf("create Pod %s/%s from PodCheckpoint %s: %w", ns, podName, name, err)
	}
	fmt.Fprintf(env.Stdout, "pod/%s created on node %s from %s\n", created.Name, created.Spec.NodeName, filepath.Base(pc.Status.Location))
	if !wait {
		return nil
	}
	for {
		got, err := c.GetPod(ctx, ns, podName)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read Pod %s/%s: %w", ns, podName, err)
		}
		if err == nil {
			switch got.Status.Phase {
			case corev1.PodRunning:
				fmt.Fprintf(env.Stdout, "pod/%s running, restored\n", podName)
				return nil
			case corev1.PodFailed, corev1.PodSucceeded:
				return fmt.Errorf("pod %s/%s ended %s: %s", ns, podName, got.Status.Phase, got.Status.Message)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for Pod %s/%s to run: %w", ns, podName, ctx.Err())
		case <-time.After(env.Poll):
		}
	}
}

// NewPod is the Pod that restores pc: its recorded pod's labels,
// annotations and spec, bound to the checkpoint's node (the checkpoint is
// there), under runtimeClass, with AnnotationCheckpoint naming the
// checkpoint and the old pod's hostname.
func NewPod(pc *v1alpha1.PodCheckpoint, name, runtimeClass string) *corev1.Pod {
	t := pc.Status.Pod.DeepCopy()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pc.Namespace, Name: name, Labels: t.Labels, Annotations: t.Annotations},
		Spec:       t.Spec,
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationCheckpoint] = filepath.Base(pc.Status.Location)
	p.Spec.NodeName = pc.Status.NodeName
	p.Spec.RuntimeClassName = &runtimeClass
	// The API server fills the overhead from the RuntimeClass and refuses
	// one that disagrees with it.
	p.Spec.Overhead = nil
	// The checkpointed processes saw the old pod's hostname (its name,
	// unless the spec set one): the new sandbox keeps it.
	if p.Spec.Hostname == "" {
		p.Spec.Hostname = pc.Spec.PodName
	}
	return p
}
