//go:build !linux

package criu

import "github.com/nodeshim/nodeshim/kernel/capability"

// lazyPagesFinding: userfaultfd(2) is Linux's.
func lazyPagesFinding(string) capability.Finding {
	return capability.Findingf(capability.Unsupported, "lazy pages need Linux's userfaultfd(2)")
}
