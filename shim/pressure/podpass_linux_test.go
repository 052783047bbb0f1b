package pressure

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
)

// refusingPass is a PassSource whose every pass fails the same way.
type refusingPass struct{ passes int }

func (p *refusingPass) Pass(dir string, depth int, fn func(*cgroup.PassStats)) error {
	p.passes++
	return fmt.Errorf("pass of %s: refused", dir)
}

// TestPodReaderLogsAFailingPassOnce: the pods are read from their files
// when the kernel pass fails, and a pass that fails the same way at every
// read is logged once, not every 10 s.
func TestPodReaderLogsAFailingPassOnce(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", "cgroup", "testdata", "unified"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	pass := &refusingPass{}
	p := &podReader{roots: cgroup.PodRoots{V2: root, Parent: "/"}, log: slog.New(slog.NewTextHandler(logs, nil)),
		reader: cgroup.NewKeepReader(cgroup.KeepOptions{})}
	p.reader.SetPass(pass)
	defer p.close()
	for range 3 {
		if v := p.readNow(t.Context(), time.Now()); v.Unknown != "" || len(v.Items) == 0 {
			t.Fatalf("pods view %+v", v)
		}
	}
	if n := strings.Count(logs.String(), "the kernel pass over the pods' cgroups failed"); pass.passes != 3 || n != 1 {
		t.Errorf("%d passes, %d warnings, want 3 and 1:\n%s", pass.passes, n, logs.String())
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Errorf("the warning does not say why: %s", logs.String())
	}
}
