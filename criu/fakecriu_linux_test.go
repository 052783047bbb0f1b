package criu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// envFakeCriu makes the test binary act as the criu of fakeSwrkCriu
// (runFakeCriu) instead of running the tests; its value is the path of the
// fakeSwrk that says how.
const envFakeCriu = "NODESHIM_TEST_FAKE_CRIU"

// fakeFeatureBlock is how long a blocking `criu check --feature` of the
// fake criu sleeps: long enough that a run nobody stopped is unmistakable
// in a test's duration, short enough that such a failure ends.
const fakeFeatureBlock = 30 * time.Second

// fakeCheckError is the error line the fake criu's failing check logs, as
// CRIU's cr-check.c would.
const fakeCheckError = "Error (criu/cr-check.c:1645): fake criu: only the full check fails"

// fakeSwrk says how the fake criu answers. It logs one line per run or
// answer to Log: "swrk" when `criu swrk 3` starts, then the type of each
// request it answers, as it answers; "feature:NAME" when `criu check
// --feature NAME` starts and "feature-done:NAME" when it ends; "version"
// and "check" for `criu --version` and `criu check`.
type fakeSwrk struct {
	Log         string
	CheckPasses bool
	// Has is FEATURE_CHECK's answer for each CriuFeatures field asked
	// (mem_track, lazy_pages, pidfd_store); a field not listed is false.
	Has map[string]bool
	// Await are the feature runs whose start the answer to CHECK waits
	// for (they show in Log), so that they run alongside it.
	Await []string
	// GiveUp, if not zero, is when that wait stops and logs
	// "gave-up-waiting-for-feature-runs", so that a test fails rather
	// than hangs.
	GiveUp time.Time
	// Block makes `criu check --feature` sleep fakeFeatureBlock first.
	Block bool
}

// fakeSwrkCriu writes a criu that execs the test binary as runFakeCriu
// with cfg, and returns it and the path of its log (cfg.Log). The swrk session of that criu speaks CRIU's
// RPC protocol (one rpc.CriuReq or rpc.CriuResp per SOCK_SEQPACKET
// packet on fd 3) and answers VERSION with 4.1.1, where `criu --version`
// says 4.0.
func fakeSwrkCriu(t *testing.T, cfg fakeSwrk) (Binary, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Log = filepath.Join(dir, "log")
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "fake.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// exec, so that a kill of the run reaches the process that logs. A
	// test binary built with -race sleeps a second before a successful
	// exit unless atexit_sleep_ms says otherwise.
	script := fmt.Sprintf("#!/bin/sh\nexport %s='%s'\nexport GORACE=\"${GORACE:+$GORACE }atexit_sleep_ms=0\"\nexec '%s' \"$@\"\n", envFakeCriu, cfgPath, self)
	bin := Binary{Path: filepath.Join(dir, "criu"), Source: "configured"}
	if err := os.WriteFile(bin.Path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, cfg.Log
}

// runFakeCriu is the fake criu of fakeSwrkCriu, run with args; it returns
// the exit code.
func runFakeCriu(cfgPath string, args []string) int {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var c fakeSwrk
	if err := json.Unmarshal(b, &c); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cfgPath, err)
		return 2
	}
	switch {
	case slices.Equal(args, []string{"--version"}):
		c.log("version")
		fmt.Println("Version: 4.0")
		return 0
	case slices.Equal(args, []string{"check"}):
		c.log("check")
		if c.CheckPasses {
			fmt.Println("Looks good.")
			return 0
		}
		fmt.Println(fakeCheckError)
		return 1
	case len(args) == 3 && args[0] == "check" && args[1] == "--feature":
		c.log("feature:" + args[2])
		if c.Block {
			time.Sleep(fakeFeatureBlock)
		}
		c.log("feature-done:" + args[2])
		fmt.Printf("%s is supported\n", args[2])
		return 0
	case slices.Equal(args, []string{"swrk", "3"}):
		c.log("swrk")
		if err := c.serve(3); err != nil {
			fmt.Fprintf(os.Stderr, "fake criu swrk: %v\n", err)
			return 1
		}
		return 0
	}
	c.log("unknown:" + strings.Join(args, ","))
	return 2
}

// log appends line to c.Log; O_APPEND keeps the lines of concurrent runs
// whole.
func (c fakeSwrk) log(line string) {
	f, err := os.OpenFile(c.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err == nil {
		_, err = f.WriteString(line + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// serve answers the requests on the swrk socket sk as CRIU's cr-service.c
// does: until a request without keep_open, or CHECK, which never keeps the
// session open, or until the client closes the socket.
func (c fakeSwrk) serve(sk int) error {
	// CRIU opens a request's images directory through the client's
	// /proc/<pid>/fd/<images_dir_fd>, with the pid from SO_PEERCRED.
	cred, err := unix.GetsockoptUcred(sk, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return fmt.Errorf("SO_PEERCRED: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(sk, buf)
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
		if n == 0 {
			return nil
		}
		req := &rpc.CriuReq{}
		if err := proto.Unmarshal(buf[:n], req); err != nil {
			return fmt.Errorf("decode request: %w", err)
		}
		resp := &rpc.CriuResp{Type: req.Type, Success: proto.Bool(true)}
		switch req.GetType() {
		case rpc.CriuReqType_VERSION:
			resp.Version = &rpc.CriuVersion{MajorNumber: proto.Int32(4), MinorNumber: proto.Int32(1), Sublevel: proto.Int32(1)}
		case rpc.CriuReqType_FEATURE_CHECK:
			// CRIU answers the fields asked, and only those.
			ask := req.GetFeatures()
			answer := func(asked *bool, field string) *bool {
				if asked == nil {
					return nil
				}
				return proto.Bool(c.Has[field])
			}
			resp.Features = &rpc.CriuFeatures{
				MemTrack:   answer(ask.MemTrack, "mem_track"),
				LazyPages:  answer(ask.LazyPages, "lazy_pages"),
				PidfdStore: answer(ask.PidfdStore, "pidfd_store"),
			}
		case rpc.CriuReqType_CHECK:
			c.await()
			out := ""
			if !c.CheckPasses {
				out = fakeCheckError + "\n"
			}
			p := fmt.Sprintf("/proc/%d/fd/%d/%s", cred.Pid, req.GetOpts().GetImagesDirFd(), req.GetOpts().GetLogFile())
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("check log: %w", err)
			}
			_, err = f.WriteString(out)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("check log: %w", err)
			}
			resp.Success = proto.Bool(c.CheckPasses)
			if c.CheckPasses {
				// CRIU prints the verdict on the swrk's stdout.
				fmt.Println("Looks good.")
			}
		default:
			return fmt.Errorf("unexpected %s request", req.GetType())
		}
		c.log(req.GetType().String())
		b, err := proto.Marshal(resp)
		if err != nil {
			return fmt.Errorf("encode response: %w", err)
		}
		if _, err := unix.Write(sk, b); err != nil {
			return fmt.Errorf("send response: %w", err)
		}
		if !req.GetKeepOpen() || req.GetType() == rpc.CriuReqType_CHECK {
			return nil
		}
	}
}

// await waits until every run in c.Await has logged its start, or until
// c.GiveUp.
func (c fakeSwrk) await() {
	for {
		b, _ := os.ReadFile(c.Log)
		lines := strings.Fields(string(b))
		if !slices.ContainsFunc(c.Await, func(name string) bool { return !slices.Contains(lines, "feature:"+name) }) {
			return
		}
		if !c.GiveUp.IsZero() && time.Now().After(c.GiveUp) {
			c.log("gave-up-waiting-for-feature-runs")
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
