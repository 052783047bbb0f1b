package seccomp

import (
	"fmt"
	"strings"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// Meaning is what a profile does with one syscall of the native
// architecture.
type Meaning struct {
	Syscall string `json:"syscall"`
	Nr      int    `json:"nr"`
	// Action describes the outcome, with conditions when arguments decide:
	// "ALLOW if arg0 == 0x0; otherwise ERRNO(1)".
	Action string `json:"action"`
	// Source is "rule" (with Rules naming them), "default" or "enosys"
	// (above the highest syscall the profile names).
	Source string   `json:"source"`
	Rules  []string `json:"rules,omitempty"`
}

// Explanation is the whole meaning of a profile on this node.
type Explanation struct {
	Arch     string    `json:"arch"`
	Default  string    `json:"default"`
	Syscalls []Meaning `json:"syscalls"`
	// ByRule, ByDefault and ByENOSYS count Syscalls by source.
	ByRule    int       `json:"byRule"`
	ByDefault int       `json:"byDefault"`
	ByENOSYS  int       `json:"byENOSYS"`
	Warnings  []Warning `json:"warnings,omitempty"`
}

func condString(c Arg) string {
	switch c.Op {
	case OpMaskedEqual:
		return fmt.Sprintf("arg%d & %#x == %#x", c.Index, c.Value, c.ValueTwo)
	}
	ops := map[Op]string{OpNotEqual: "!=", OpLessThan: "<", OpLessEqual: "<=", OpEqualTo: "==", OpGreaterEqual: ">=", OpGreaterThan: ">"}
	return fmt.Sprintf("arg%d %s %#x", c.Index, ops[c.Op], c.Value)
}

// Explain lists, for every syscall libseccomp knows on the native
// architecture, what the compiled profile does with it.
func Explain(p *Profile, f *Filter) (*Explanation, error) {
	native, err := nativeArch()
	if err != nil {
		return nil, err
	}
	ex := &Explanation{Arch: native.String(), Default: p.DefaultVerdict().String(), Warnings: append(append([]Warning(nil), f.Warnings...), f.Skipped...)}
	var stubMax int64 = -1
	for _, a := range f.ENOSYS {
		if a.Name == native.String() {
			stubMax = int64(a.MaxNr)
		}
	}
	idx := ruleIndex(p)
	for nr := 0; nr < 1024; nr++ {
		name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(native)
		if err != nil {
			continue
		}
		m := Meaning{Syscall: name, Nr: nr}
		var parts []string
		conditional := false
		for _, i := range idx[name] {
			s := &p.Syscalls[i]
			m.Rules = append(m.Rules, s.Path)
			if len(s.Args) == 0 {
				parts = append(parts, s.Verdict().String())
				continue
			}
			conditional = true
			var alts []string
			for _, conds := range ruleSplit(s.Args) {
				cs := make([]string, len(conds))
				for i, c := range conds {
					cs[i] = condString(c)
				}
				alts = append(alts, strings.Join(cs, " && "))
			}
			parts = append(parts, s.Verdict().String()+" if "+strings.Join(alts, " || "))
		}
		switch {
		case len(m.Rules) > 0:
			m.Source = "rule"
			if conditional {
				parts = append(parts, "otherwise "+p.DefaultVerdict().String())
			}
			m.Action = strings.Join(parts, "; ")
			ex.ByRule++
		case stubMax >= 0 && int64(nr) > stubMax:
			m.Source = "enosys"
			m.Action = "ERRNO(38) (newer than the profile)"
			ex.ByENOSYS++
		default:
			m.Source = "default"
			m.Action = p.DefaultVerdict().String()
			ex.ByDefault++
		}
		ex.Syscalls = append(ex.Syscalls, m)
	}
	return ex, nil
}
