package main

import (
	"errors"
	"testing"
)

func TestPodOwner(t *testing.T) {
	tests := []struct {
		name   string
		pod    string
		labels map[string]string
		want   string
	}{
		{"replicaset", "web-7d4f8b-x2k9q", map[string]string{"pod-template-hash": "7d4f8b", "app": "web"}, "ReplicaSet/web-7d4f8b"},
		{"replicaset, hash not in the name", "web-x2k9q", map[string]string{"pod-template-hash": "7d4f8b"}, ""},
		{"statefulset", "db-2", map[string]string{"statefulset.kubernetes.io/pod-name": "db-2", "controller-revision-hash": "db-6c9f"}, "StatefulSet/db"},
		{"statefulset label of another pod", "db-2", map[string]string{"statefulset.kubernetes.io/pod-name": "db-3", "controller-revision-hash": "db-6c9f"}, ""},
		{"job", "batch-abcde", map[string]string{"batch.kubernetes.io/job-name": "batch"}, "Job/batch"},
		{"job, older label", "batch-abcde", map[string]string{"job-name": "batch"}, "Job/batch"},
		{"bare pod", "debug", map[string]string{"app": "debug"}, ""},
		{"no dash", "web", map[string]string{"pod-template-hash": "web"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podOwner(tc.pod, tc.labels)
			if tc.want == "" {
				if !errors.Is(err, errNoOwner) {
					t.Fatalf("podOwner = %q, %v; want errNoOwner", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("podOwner = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
