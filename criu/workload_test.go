package criu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// The test binary doubles as the workloads it checkpoints: started with
// envWorkload set, TestMain runs the workload instead of the tests. With
// envFakeCriu set, it is a fake criu (runFakeCriu).
const (
	envWorkload    = testworkload.EnvKind
	envWorkloadDir = testworkload.EnvDir
	envWorkloadMiB = testworkload.EnvMiB
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envFakeCriu); cfg != "" {
		os.Exit(runFakeCriu(cfg, os.Args[1:]))
	}
	if dir := os.Getenv(envLeaderChild); dir != "" {
		runLeaderChild(dir)
		return
	}
	switch os.Getenv(envWorkload) {
	case "":
	case "count":
		testworkload.RunCounter(os.Getenv(envWorkloadDir), os.Getenv(envWorkloadMiB), false)
		return
	case "count-tcp":
		testworkload.RunCounter(os.Getenv(envWorkloadDir), os.Getenv(envWorkloadMiB), true)
		return
	case "checkpoint":
		runCheckpointer(os.Getenv(envWorkloadDir))
		return
	case "dirty":
		runDirtier(os.Getenv(envWorkloadDir), os.Getenv(envWorkloadMiB))
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown workload %q\n", os.Getenv(envWorkload))
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

// requireCriu gates a test on root and a criu that passes `criu check`.
func requireCriu(t testing.TB) Binary {
	t.Helper()
	testutil.RequireRoot(t)
	b, err := Find("", nil)
	if err != nil {
		testutil.Skip(t, "no criu (run `make criu-tools`): %v", err)
	}
	if _, err := b.Check(t.Context()); err != nil {
		testutil.Skip(t, "%v", err)
	}
	return b
}

// runCheckpointer checkpoints the pid in dir/target into the root dir in
// dir/root, writing dir/dumping once CRIU has written its first bytes; the
// test SIGKILLs it then.
func runCheckpointer(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "target"))
	if err != nil {
		os.Exit(6)
	}
	pid, _ := strconv.Atoi(string(b))
	bin, err := Find("", nil)
	if err != nil {
		os.Exit(6)
	}
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		os.Exit(6)
	}
	// dir/seal, when there, holds an age recipient and the path of a
	// signing key (PEM), one a line: the checkpoint is sealed.
	var so seal.WriteOptions
	if b, err := os.ReadFile(filepath.Join(dir, "seal")); err == nil {
		recipient, keyFile, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		rs, err := seal.ParseRecipients([]string{recipient})
		if err != nil {
			os.Exit(6)
		}
		key, err := seal.LoadSigningKey(keyFile)
		if err != nil {
			os.Exit(6)
		}
		so = seal.WriteOptions{Recipients: rs, Signer: &seal.Signer{Node: "node-a", Key: key}}
	}
	var once bool
	_, err = Checkpoint(context.Background(), tg, Options{
		Binary: bin, RootDir: filepath.Join(dir, "root"), ProgressInterval: 5 * time.Millisecond, Seal: so,
		Progress: func(p Progress) {
			if !once && p.Phase == "dumping" && p.Bytes > 0 {
				once = true
				_ = os.WriteFile(filepath.Join(dir, "dumping"), nil, 0o600)
			}
		},
	})
	if err != nil {
		os.Exit(7)
	}
	os.Exit(0)
}
