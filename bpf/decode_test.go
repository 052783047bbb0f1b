package bpf

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// rawOOMEvent encodes e as the kernel lays out struct oom_event.
func rawOOMEvent(t testing.TB, e oomOomEvent) []byte {
	t.Helper()
	b, err := binary.Append(nil, binary.NativeEndian, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeOOMEvent(t *testing.T) {
	page := uint64(os.Getpagesize())
	comm := [16]int8{}
	for i, c := range "stress-ng-vm" {
		comm[i] = int8(c)
	}
	var name, parent [96]int8
	for i, c := range "cri-containerd-0123abcd.scope" {
		name[i] = int8(c)
	}
	for i, c := range "kubepods-burstable-pod1234.slice" {
		parent[i] = int8(c)
	}
	full := oomOomEvent{TimestampNs: 42, CgroupId: 7, TotalVm: 100, Rss: 10, Pid: 1234, Tgid: 1230, Hook: 1, OomScoreAdj: -998, Comm: comm,
		CgroupName: name, CgroupParentName: parent}
	unterminated := full
	for i := range unterminated.CgroupName {
		unterminated.CgroupName[i] = 'a'
	}
	cases := []struct {
		name    string
		raw     []byte
		want    OOMEvent
		wantErr error
	}{
		{"fentry event", rawOOMEvent(t, full), OOMEvent{PID: 1234, TGID: 1230, Comm: "stress-ng-vm", CgroupID: 7,
			CgroupName: "cri-containerd-0123abcd.scope", CgroupParentName: "kubepods-burstable-pod1234.slice",
			TotalVMBytes: 100 * page, RSSBytes: 10 * page, OOMScoreAdj: -998, Hook: OOMHookFentry}, nil},
		{"ring buffer padding after the record", append(rawOOMEvent(t, full), 0, 0, 0, 0), OOMEvent{PID: 1234, TGID: 1230, Comm: "stress-ng-vm", CgroupID: 7,
			CgroupName: "cri-containerd-0123abcd.scope", CgroupParentName: "kubepods-burstable-pod1234.slice",
			TotalVMBytes: 100 * page, RSSBytes: 10 * page, OOMScoreAdj: -998, Hook: OOMHookFentry}, nil},
		{"cgroup name without its NUL", rawOOMEvent(t, unterminated), OOMEvent{PID: 1234, TGID: 1230, Comm: "stress-ng-vm", CgroupID: 7,
			CgroupName: strings.Repeat("a", 96), CgroupParentName: "kubepods-burstable-pod1234.slice",
			TotalVMBytes: 100 * page, RSSBytes: 10 * page, OOMScoreAdj: -998, Hook: OOMHookFentry}, nil},
		{"raw tracepoint event", rawOOMEvent(t, oomOomEvent{CgroupId: 7, TotalVm: 100, Rss: 10, Pid: 1234, Tgid: 1230, Hook: 4, Comm: comm}), OOMEvent{PID: 1234, TGID: 1230, Comm: "stress-ng-vm", CgroupID: 7, TotalVMBytes: 100 * page, RSSBytes: 10 * page, Hook: OOMHookRawTracepoint}, nil},
		{"tracepoint event with pid only (before 6.8)", rawOOMEvent(t, oomOomEvent{Pid: 9, Hook: 3}), OOMEvent{PID: 9, Hook: OOMHookTracepoint}, nil},
		{"tracepoint event in KiB (6.8+)", rawOOMEvent(t, oomOomEvent{Pid: 9, Hook: 3, TotalVm: 4096, Rss: 2048, MemInKib: 1}), OOMEvent{PID: 9, Hook: OOMHookTracepoint, TotalVMBytes: 4 << 20, RSSBytes: 2 << 20}, nil},
		{"truncated", rawOOMEvent(t, full)[:40], OOMEvent{}, ErrShortOOMEvent},
		{"empty", nil, OOMEvent{}, ErrShortOOMEvent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeOOMEvent(tc.raw)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got.OOMEvent != tc.want {
				t.Errorf("got %+v\nwant %+v", got.OOMEvent, tc.want)
			}
		})
	}
}

func FuzzDecodeOOMEvent(f *testing.F) {
	f.Add(rawOOMEvent(f, oomOomEvent{Pid: 1, Tgid: 1, Hook: 1}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := decodeOOMEvent(raw)
		if err != nil {
			if !errors.Is(err, ErrShortOOMEvent) {
				t.Fatalf("error does not wrap ErrShortOOMEvent: %v", err)
			}
			return
		}
		if len(ev.CgroupName) > 96 || len(ev.CgroupParentName) > 96 {
			t.Fatalf("cgroup names longer than their fields: %q %q", ev.CgroupName, ev.CgroupParentName)
		}
		if len(ev.Comm) > 16 {
			t.Fatalf("comm longer than TASK_COMM_LEN: %q", ev.Comm)
		}
	})
}

// TestRecentVictimsMarkedAgain: the fentry and kprobe hooks see
// mark_oom_victim called again for a task already marked (a group kill
// marks the chosen victim, then every task of its cgroup); that second
// event is dropped, other tasks' and later ones are not.
func TestRecentVictimsMarkedAgain(t *testing.T) {
	ev := func(pid, tgid uint32, cgroup uint64, at time.Duration) decodedOOMEvent {
		return decodedOOMEvent{OOMEvent: OOMEvent{PID: pid, TGID: tgid, CgroupID: cgroup}, rawTime: uint64(time.Hour + at)}
	}
	var r recentVictims
	for _, tc := range []struct {
		name  string
		ev    decodedOOMEvent
		again bool
	}{
		{"the chosen victim", ev(100, 100, 7, 0), false},
		{"the group kill marks it again", ev(100, 100, 7, time.Millisecond), true},
		{"the group's other task", ev(90, 90, 7, 2*time.Millisecond), false},
		{"a thread of the victim", ev(101, 100, 7, 3*time.Millisecond), false},
		{"the same pid in another cgroup", ev(100, 100, 8, 4*time.Millisecond), false},
		{"the same task after the window", ev(100, 100, 7, 2*time.Second), false},
		{"an event without a time", decodedOOMEvent{OOMEvent: OOMEvent{PID: 5}}, false},
		{"again without a time", decodedOOMEvent{OOMEvent: OOMEvent{PID: 5}}, false},
	} {
		if got := r.again(tc.ev); got != tc.again {
			t.Errorf("%s: again = %v, want %v", tc.name, got, tc.again)
		}
	}
	// More tasks than it remembers: the oldest is forgotten, not the
	// newest.
	for i := range uint32(len(r.keys)) {
		r.again(ev(1000+i, 1000+i, 9, 3*time.Second))
	}
	if r.again(ev(1000+uint32(len(r.keys))-1, 1000+uint32(len(r.keys))-1, 9, 3*time.Second+time.Millisecond)) != true {
		t.Error("the newest task forgotten")
	}
	if r.again(ev(100, 100, 7, 2*time.Second+time.Millisecond)) {
		t.Error("a task remembered past the ring's size")
	}
}
