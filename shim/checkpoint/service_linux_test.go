package checkpoint

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

var rt runtimetest.Env

func TestMain(m *testing.M) {
	// The test binary doubles as the counter the retention tests checkpoint.
	if os.Getenv(testworkload.EnvKind) == "count" {
		testworkload.RunCounter(os.Getenv(testworkload.EnvDir), os.Getenv(testworkload.EnvMiB), false)
		return
	}
	// Or the CLI's checkpoint of a pid (Run), as a process to kill.
	if os.Getenv(envRunPID) != "" {
		os.Exit(runCLICheckpoint())
	}
	os.Exit(rt.Main(m))
}

// resolverFunc is a CRI resolver for the error paths; the real runtime
// path is tested end to end in shim/daemon.
type resolverFunc func(context.Context, cri.Target) (cri.Process, error)

func (f resolverFunc) Resolve(ctx context.Context, t cri.Target) (cri.Process, error) {
	return f(ctx, t)
}

func newService(enabled bool, r cri.Resolver, dialErr error) (*Service, *status.Model) {
	m := status.New(nil)
	return New(Options{
		Settings: func() Settings {
			return Settings{Enabled: enabled, Dir: os.TempDir(), DefaultTimeout: time.Minute, RuntimeEndpoint: "unix:///run/test.sock"}
		},
		Dial: func(string) (cri.Resolver, func() error, error) {
			if dialErr != nil {
				return nil, nil, dialErr
			}
			return r, func() error { return nil }, nil
		},
		FindCriu: func() (criu.Binary, error) { return criu.Binary{}, criu.ErrNoBinary },
		Model:    m,
	}), m
}

var web = criu.ContainerRef{Namespace: "default", Pod: "web-0", Container: "app"}

func TestCheckpointErrors(t *testing.T) {
	found := resolverFunc(func(context.Context, cri.Target) (cri.Process, error) {
		return cri.Process{ContainerID: "c1", PID: os.Getpid()}, nil
	})
	tests := []struct {
		name         string
		enabled      bool
		ref          criu.ContainerRef
		resolver     cri.Resolver
		dialErr      error
		wantNotFound bool
		wantErr      error
	}{
		{"disabled", false, web, found, nil, true, ErrDisabled},
		{"namespace not a DNS label", true, criu.ContainerRef{Namespace: "Default", Pod: "web-0", Container: "app"}, found, nil, true, nil},
		{"pod with a slash", true, criu.ContainerRef{Namespace: "default", Pod: "a/b", Container: "app"}, found, nil, true, nil},
		{"empty container", true, criu.ContainerRef{Namespace: "default", Pod: "web-0"}, found, nil, true, nil},
		{"unknown container", true, web, resolverFunc(func(_ context.Context, t cri.Target) (cri.Process, error) {
			return cri.Process{}, cri.ErrNotFound
		}), nil, true, cri.ErrNotFound},
		{"runtime unreachable", true, web, nil, errors.New("dial: connection refused"), false, nil},
		{"runtime error", true, web, resolverFunc(func(context.Context, cri.Target) (cri.Process, error) {
			return cri.Process{}, errors.New("rpc error: code = Unavailable")
		}), nil, false, nil},
		{"container process gone", true, web, resolverFunc(func(context.Context, cri.Target) (cri.Process, error) {
			return cri.Process{PID: 1 << 30}, nil
		}), nil, false, criu.ErrNoProcess},
		{"no criu", true, web, found, nil, false, criu.ErrNoBinary},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, m := newService(tt.enabled, tt.resolver, tt.dialErr)
			defer s.Close()
			_, err := s.Checkpoint(context.Background(), tt.ref, 0)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrNotFound) != tt.wantNotFound {
				t.Errorf("err %v: not found = %v, want %v", err, errors.Is(err, ErrNotFound), tt.wantNotFound)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err %v, want %v", err, tt.wantErr)
			}
			// None of these reached CRIU: no history, no condition.
			d := m.Snapshot()
			if len(d.Checkpoints) != 0 {
				t.Errorf("history %+v", d.Checkpoints)
			}
			for _, c := range d.Conditions {
				if c.Type == status.TypeCheckpoint {
					t.Errorf("condition %+v", c)
				}
			}
		})
	}
}

// TestBusyAndClose: a second checkpoint of a container in progress fails
// at once with ErrBusy; Close aborts the one in progress, waits for it,
// and refuses new ones.
func TestBusyAndClose(t *testing.T) {
	entered := make(chan struct{})
	var resolverDone atomic.Bool
	s, _ := newService(true, resolverFunc(func(ctx context.Context, _ cri.Target) (cri.Process, error) {
		close(entered)
		<-ctx.Done()
		resolverDone.Store(true)
		return cri.Process{}, ctx.Err()
	}), nil)
	first := make(chan error, 1)
	go func() {
		_, err := s.Checkpoint(context.Background(), web, time.Hour)
		first <- err
	}()
	<-entered
	if _, err := s.Checkpoint(context.Background(), web, 0); !errors.Is(err, ErrBusy) {
		t.Errorf("second checkpoint of the same container: %v, want ErrBusy", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !resolverDone.Load() {
		t.Error("Close returned before the in-flight checkpoint ended")
	}
	if err := <-first; !errors.Is(err, ErrShuttingDown) || !errors.Is(err, context.Canceled) {
		t.Errorf("in-flight checkpoint after Close: %v, want ErrShuttingDown", err)
	}
	if _, err := s.Checkpoint(context.Background(), web, 0); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("checkpoint after Close: %v, want ErrShuttingDown", err)
	}
}

func TestValidRef(t *testing.T) {
	tests := []struct {
		name string
		ref  criu.ContainerRef
		ok   bool
	}{
		{"plain", web, true},
		{"dotted pod", criu.ContainerRef{Namespace: "kube-system", Pod: "coredns-7db6d8ff4d-abcde.x", Container: "coredns"}, true},
		{"upper case", criu.ContainerRef{Namespace: "default", Pod: "Web", Container: "app"}, false},
		{"dot in container", criu.ContainerRef{Namespace: "default", Pod: "web", Container: "a.b"}, false},
		{"dot dot", criu.ContainerRef{Namespace: "default", Pod: "..", Container: "app"}, false},
		{"too long namespace", criu.ContainerRef{Namespace: string(make([]byte, 64)), Pod: "web", Container: "app"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidRef(tt.ref)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrNotFound)) {
				t.Errorf("ValidRef(%v) = %v", tt.ref, err)
			}
		})
	}
}
