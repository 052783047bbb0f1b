package bpf

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// btfSpec marshals types into raw BTF and loads it back, as the kernel's
// /sys/kernel/btf/vmlinux would be.
func btfSpec(t *testing.T, types ...btf.Type) *btf.Spec {
	t.Helper()
	b, err := btf.NewBuilder(types, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestTracepointTakesTask: the raw tracepoint hook is offered only where
// the kernel's btf_trace_mark_victim says its first argument is the
// victim's task_struct (6.8+, or backported), not where it is the pid, nor
// where the typedef is missing or not a probe's prototype.
func TestTracepointTakesTask(t *testing.T) {
	voidPtr := &btf.Pointer{Target: &btf.Void{}}
	task := &btf.Struct{Name: "task_struct", Size: 8, Members: []btf.Member{{Name: "pid", Type: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}}}}
	intT := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	uid := &btf.Typedef{Name: "uid_t", Type: &btf.Int{Name: "unsigned int", Size: 4}}
	probe := func(params ...btf.Type) btf.Type {
		fp := &btf.FuncProto{Return: &btf.Void{}}
		for _, p := range params {
			fp.Params = append(fp.Params, btf.FuncParam{Type: p})
		}
		return &btf.Typedef{Name: "btf_trace_mark_victim", Type: &btf.Pointer{Target: fp}}
	}
	cases := []struct {
		name string
		typ  btf.Type
		want string // "" when supported, else part of the error
	}{
		{"6.8+: task_struct and uid", probe(voidPtr, &btf.Pointer{Target: task}, uid), ""},
		{"const task_struct", probe(voidPtr, &btf.Pointer{Target: &btf.Const{Type: task}}), ""},
		{"before 6.8: the pid", probe(voidPtr, intT), "passes int"},
		{"no arguments after the data pointer", probe(voidPtr), "passes nothing"},
		{"pointer to another struct", probe(voidPtr, &btf.Pointer{Target: &btf.Struct{Name: "mm_struct", Size: 8}}), "passes struct mm_struct *"},
		{"not a probe's prototype", &btf.Typedef{Name: "btf_trace_mark_victim", Type: intT}, "passes nothing"},
		{"no typedef", &btf.Typedef{Name: "btf_trace_sys_enter", Type: intT}, "btf_trace_mark_victim in the kernel BTF"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tracepointTakesTask(btfSpec(t, tc.typ), "mark_victim")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("accepted, want an error saying %q", tc.want)
			case !errors.Is(err, ebpf.ErrNotSupported) || !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q: want ebpf.ErrNotSupported saying %q", err, tc.want)
			}
		})
	}
}
