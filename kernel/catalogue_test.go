package kernel

import (
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

func TestCatalogueIsWellFormed(t *testing.T) {
	reqs := Catalogue()
	if err := capability.Validate(reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.Group == "" || len(r.NeededBy) == 0 {
			t.Errorf("%s: group %q, neededBy %v", r.ID, r.Group, r.NeededBy)
		}
	}
}
