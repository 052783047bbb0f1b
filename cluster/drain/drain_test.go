package drain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
)

func TestPlan(t *testing.T) {
	now := metav1.Now()
	owned := func(kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "x", UID: "u", Controller: ptr.To(true)}}
	}
	migrate := map[string]string{v1alpha1.AnnotationOnDrain: v1alpha1.DrainMigrate}
	pod := func(ns, name string, phase corev1.PodPhase, f func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
		if f != nil {
			f(&p)
		}
		return p
	}
	steps := Plan([]corev1.Pod{
		pod("shop", "web", corev1.PodRunning, func(p *corev1.Pod) { p.Annotations = migrate }),
		pod("shop", "api", corev1.PodRunning, func(p *corev1.Pod) { p.OwnerReferences = owned("ReplicaSet") }),
		pod("kube-system", "agent", corev1.PodRunning, func(p *corev1.Pod) { p.OwnerReferences = owned("DaemonSet") }),
		pod("kube-system", "etcd-node-a", corev1.PodRunning, func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "h"} }),
		pod("shop", "job-1", corev1.PodSucceeded, nil),
		pod("shop", "old", corev1.PodRunning, func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		pod("shop", "starting", corev1.PodPending, func(p *corev1.Pod) { p.Annotations = migrate }),
		pod("shop", "other-value", corev1.PodRunning, func(p *corev1.Pod) { p.Annotations = map[string]string{v1alpha1.AnnotationOnDrain: "evict"} }),
	})
	want := []struct {
		ns, pod string
		action  Action
		why     string
	}{
		{"kube-system", "agent", Skip, "a DaemonSet's pod"},
		{"kube-system", "etcd-node-a", Skip, "a static pod"},
		{"shop", "api", Evict, ""},
		{"shop", "job-1", Skip, "finished (Succeeded)"},
		{"shop", "old", Skip, "being deleted"},
		// Only a running pod has state to move: one still starting is
		// evicted, and starts afresh elsewhere.
		{"shop", "other-value", Evict, ""},
		{"shop", "starting", Evict, ""},
		{"shop", "web", Migrate, ""},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d: %+v", len(steps), len(want), steps)
	}
	for i, w := range want {
		if s := steps[i]; s.Namespace != w.ns || s.Pod != w.pod || s.Action != w.action || s.Why != w.why {
			t.Errorf("step %d: %+v, want %s/%s %s %q", i, s, w.ns, w.pod, w.action, w.why)
		}
	}
}
