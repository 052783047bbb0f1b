package reporter

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshim/nodeshim/shim/status"
)

// ReasonOOMKilling is the reason of the Event for an OOM kill, as
// node-problem-detector's kernel monitor names it; nodeshim's Event is
// about the victim's Pod when the shim resolved it.
const ReasonOOMKilling = "OOMKilling"

// newOOMKills returns the kills of the document not yet reported: the last
// Total-seen of Recent. A shim whose total went down restarted: all of
// Recent is new to it. Kills are reported at most once per reporter; a
// restarted reporter reports the shim's Recent kills again, and the
// Events' names, derived from the kill, make the API server refuse the
// duplicates.
func newOOMKills(k status.OOMKills, seen uint64) []status.OOMKill {
	n := k.Total - seen
	if k.Total < seen {
		n = k.Total
	}
	if n > uint64(len(k.Recent)) {
		n = uint64(len(k.Recent))
	}
	return k.Recent[len(k.Recent)-int(n):]
}

// queueOOMEvents queues an Event for each OOM kill the reporter has not
// reported yet.
func (r *Reporter) queueOOMEvents(k status.OOMKills) {
	kills := newOOMKills(k, r.oomSeen)
	r.oomSeen = k.Total
	for _, kill := range kills {
		if !r.oomLimiter.TryAccept() || len(r.pending) >= maxPendingEvents {
			r.m.eventsDropped.Inc()
			continue
		}
		r.pending = append(r.pending, OOMEvent(kill, r.opts.NodeName, r.nodeUID, r.opts.EventNamespace))
	}
}

// OOMEvent is the Event for an OOM kill: about the victim's Pod, in the
// Pod's namespace, when the shim named its container; about the Node, in
// nodeNamespace, otherwise.
func OOMEvent(k status.OOMKill, node string, nodeUID types.UID, nodeNamespace string) corev1.Event {
	pid := k.TGID
	if pid == 0 {
		pid = k.PID
	}
	victim := fmt.Sprintf("process %d", pid)
	if k.Comm != "" {
		victim += " (" + k.Comm + ")"
	}
	mem := ""
	if k.TotalVMBytes != 0 || k.RSSBytes != 0 {
		mem = fmt.Sprintf(", total-vm:%dkB, rss:%dkB", k.TotalVMBytes/1024, k.RSSBytes/1024)
	}
	ns := nodeNamespace
	obj := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: nodeUID}
	msg := fmt.Sprintf("Out of memory: killed %s on node %s%s", victim, node, mem)
	if c := k.Container; c != nil && c.Pod != "" && c.Namespace != "" {
		ns = c.Namespace
		obj = corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: c.Namespace, Name: c.Pod, UID: types.UID(c.PodUID)}
		if c.Container != "" {
			obj.FieldPath = "spec.containers{" + c.Container + "}"
		}
		msg = fmt.Sprintf("Out of memory: killed %s in container %s of pod %s/%s (container id %s)%s",
			victim, c.Container, c.Namespace, c.Pod, c.ContainerID, mem)
	} else if k.Unresolved != "" {
		msg += "; container not resolved: " + k.Unresolved
	}
	ts := metav1.NewTime(k.Time)
	return corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// One name per kill: a reporter that restarts and sees the
			// same kill again gets AlreadyExists.
			Name:      node + ".oom." + strconv.FormatInt(k.Time.UnixNano(), 16) + "." + strconv.FormatUint(uint64(pid), 10),
			Namespace: ns,
		},
		InvolvedObject:      obj,
		Reason:              ReasonOOMKilling,
		Message:             msg,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: Component, Host: node},
		FirstTimestamp:      ts,
		LastTimestamp:       ts,
		Count:               1,
		ReportingController: "nodeshim.io/reporter",
		ReportingInstance:   node,
		Action:              "OOMKill",
	}
}
