package kubectl

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/condition"
)

// migrationSpec is the spec `migrate` asks for, checked as the
// CustomResourceDefinition would: a pod name, exactly one of a target
// node and a selector, a known mode.
func migrationSpec(pod, to, selector, mode string, deleteOriginal bool) (v1alpha1.PodMigrationSpec, error) {
	spec := v1alpha1.PodMigrationSpec{PodName: pod, TargetNode: to, Mode: v1alpha1.MigrationMode(mode), DeleteOriginal: deleteOriginal}
	if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		return spec, usagef("pod %q: %s", pod, strings.Join(errs, "; "))
	}
	switch {
	case (to == "") == (selector == ""):
		return spec, usagef("migrate needs exactly one of --to NODE and --selector K=V,...")
	case to != "":
		if errs := validation.IsDNS1123Subdomain(to); len(errs) > 0 {
			return spec, usagef("--to %q: %s", to, strings.Join(errs, "; "))
		}
	default:
		sel, err := labels.ConvertSelectorToLabelsMap(selector)
		if err != nil || len(sel) == 0 {
			return spec, usagef("--selector %q: want K=V[,K=V...]: %v", selector, err)
		}
		spec.NodeSelector = sel
	}
	switch spec.Mode {
	case v1alpha1.ModeStopAndCopy, v1alpha1.ModePreCopy, v1alpha1.ModeLazy:
	default:
		return spec, usagef("--mode %q: want %s, %s or %s", mode, v1alpha1.ModeStopAndCopy, v1alpha1.ModePreCopy, v1alpha1.ModeLazy)
	}
	if spec.Mode == v1alpha1.ModeLazy && !deleteOriginal {
		return spec, usagef("--mode %s moves the pod's memory, and the original's containers end once it is fetched: add --delete-original", v1alpha1.ModeLazy)
	}
	return spec, nil
}

// migrate creates a PodMigration of spec and, with wait, follows it to
// its end, printing each phase with what its step says.
func migrate(ctx context.Context, c *kubeapi.Client, env Env, ns, name string, spec v1alpha1.PodMigrationSpec, wait bool) error {
	if name == "" {
		name = fmt.Sprintf("%s-move-%d", spec.PodName, env.Now().Unix())
		if len(name) > validation.DNS1123SubdomainMaxLength {
			name = name[len(name)-validation.DNS1123SubdomainMaxLength:]
		}
	}
	m := &v1alpha1.PodMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if _, err := c.CreatePodMigration(ctx, m, FieldManager); err != nil {
		return fmt.Errorf("create PodMigration %s/%s of pod %s: %w", ns, name, spec.PodName, err)
	}
	fmt.Fprintf(env.Stdout, "podmigration.nodeshim.io/%s created\n", name)
	if !wait {
		return nil
	}
	var last, said string
	for {
		cur, err := c.GetPodMigration(ctx, ns, name)
		if err != nil {
			return fmt.Errorf("read PodMigration %s/%s: %w", ns, name, err)
		}
		phase, msg := migrationPhaseName(cur.Status.Phase), migrationMessage(cur)
		if phase != last || msg != said {
			last, said = phase, msg
			fmt.Fprintf(env.Stdout, "%s\t%s\n", phase, msg)
		}
		switch cur.Status.Phase {
		case v1alpha1.MigrationSucceeded:
			if d := cur.Status.Downtime; d != nil {
				fmt.Fprintf(env.Stdout, "pod %s/%s runs on node %s as %s; downtime %s\n", ns, spec.PodName, cur.Status.TargetNode, cur.Status.RestoredPod, d.Duration)
			}
			return nil
		case v1alpha1.MigrationFailed:
			return fmt.Errorf("PodMigration %s/%s failed: %s", ns, name, msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for PodMigration %s/%s (%s): %w", ns, name, phase, ctx.Err())
		case <-time.After(env.Poll):
		}
	}
}

func migrationPhaseName(p v1alpha1.MigrationPhase) string {
	if p == v1alpha1.MigrationPending {
		return "Pending"
	}
	return string(p)
}

// migrationMessage is what the latest step of m says: a failed step's
// reason and message, else the step in progress or last done.
func migrationMessage(m *v1alpha1.PodMigration) string {
	var out string
	for _, typ := range []string{v1alpha1.ConditionCheckpointed, v1alpha1.ConditionTransferred, v1alpha1.ConditionRestored} {
		for _, c := range m.Status.Conditions {
			if c.Type != typ {
				continue
			}
			if c.Status == condition.False && c.Severity == condition.SeverityError {
				return c.Reason + ": " + c.Message
			}
			out = c.Message
		}
	}
	return out
}
