package seccomp

// Outcome is what a profile means for one syscall invocation: the verdict,
// and whether that verdict is certain. It is not certain when rules with
// different verdicts all match the arguments: libseccomp's decision tree
// then picks one of them, and Candidates lists every verdict it may pick.
type Outcome struct {
	Verdict    Verdict   `json:"verdict"`
	Candidates []Verdict `json:"candidates,omitempty"`
	// Rule is the JSON path of the matching rule, "defaultAction" when no
	// rule matched.
	Rule string `json:"rule"`
}

// Accepts reports whether v is a verdict the outcome allows.
func (o Outcome) Accepts(v Verdict) bool {
	if v == o.Verdict {
		return true
	}
	for _, c := range o.Candidates {
		if c == v {
			return true
		}
	}
	return false
}

// ruleSplit returns the rules a profile entry becomes in the filter: one
// rule with all comparisons ANDed, or, when two comparisons look at the same
// argument, one rule per comparison (ORed). libseccomp cannot hold two
// comparisons of one argument in a rule; this is what runc does with them.
func ruleSplit(args []Arg) [][]Arg {
	seen := [6]bool{}
	for _, a := range args {
		if a.Index < 6 && seen[a.Index] {
			out := make([][]Arg, len(args))
			for i := range args {
				out[i] = args[i : i+1]
			}
			return out
		}
		if a.Index < 6 {
			seen[a.Index] = true
		}
	}
	return [][]Arg{args}
}

// Evaluate returns what the profile does when the syscall name is called
// with args. It follows the profile's rules (not a compiled filter), so that
// comparing it with what the kernel does under the compiled filter tests the
// whole chain.
func (p *Profile) Evaluate(name string, args [6]uint64) Outcome {
	var naming []int
	for i := range p.Syscalls {
		if containsName(p.Syscalls[i].Names, name) {
			naming = append(naming, i)
		}
	}
	return p.evaluate(naming, args)
}

// ruleIndex maps each syscall name of p to the indexes of the rules that
// name it, in order, each once: built in one pass over the names, so that
// who judges many syscalls (Explain, Verify) does not scan every rule's
// names for each.
func ruleIndex(p *Profile) map[string][]int {
	idx := map[string][]int{}
	for i, s := range p.Syscalls {
		for _, n := range s.Names {
			if r := idx[n]; len(r) == 0 || r[len(r)-1] != i {
				idx[n] = append(r, i)
			}
		}
	}
	return idx
}

// evaluate is Evaluate given the rules that name the syscall (indexes in
// p.Syscalls, in order).
func (p *Profile) evaluate(naming []int, args [6]uint64) Outcome {
	var matched []Outcome
	for _, i := range naming {
		s := &p.Syscalls[i]
		for _, conds := range ruleSplit(s.Args) {
			ok := true
			for _, c := range conds {
				if !c.Op.Match(args[c.Index], c.Value, c.ValueTwo) {
					ok = false
					break
				}
			}
			if ok {
				matched = append(matched, Outcome{Verdict: s.Verdict(), Rule: s.Path})
				break
			}
		}
	}
	if len(matched) == 0 {
		return Outcome{Verdict: p.DefaultVerdict(), Rule: "defaultAction"}
	}
	out := matched[0]
	for _, m := range matched[1:] {
		if !out.Accepts(m.Verdict) {
			if out.Candidates == nil {
				out.Candidates = []Verdict{out.Verdict}
			}
			out.Candidates = append(out.Candidates, m.Verdict)
		}
	}
	return out
}

// Names returns every syscall name the profile's rules mention, in order of
// first appearance.
func (p *Profile) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range p.Syscalls {
		for _, n := range s.Names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

func containsName(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}
