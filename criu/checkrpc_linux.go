package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// rpcFeatures are the ProbedFeatures that CRIU's RPC FEATURE_CHECK answers
// (criu/cr-service.c handle_feature_check), with the field that asks for
// each. They test the same kernel facts as `criu check --feature NAME`
// (criu/cr-check.c): mem_track is kdat.has_dirty_track, lazy_pages
// kdat.has_uffd && uffd_noncooperative(), pidfd_store kdat.has_pidfd_open
// && kdat.has_pidfd_getfd.
var rpcFeatures = map[string]func(*rpc.CriuFeatures) **bool{
	"mem_dirty_track": func(f *rpc.CriuFeatures) **bool { return &f.MemTrack },
	"uffd-noncoop":    func(f *rpc.CriuFeatures) **bool { return &f.LazyPages },
	"pidfd_store":     func(f *rpc.CriuFeatures) **bool { return &f.PidfdStore },
}

// rpcCheckLog is the log of the CHECK request, in its images directory.
const rpcCheckLog = "check.log"

// rpcCheckGrace is how long the `criu swrk` of rpcChecks may take to exit
// after its last answer before it is killed.
const rpcCheckGrace = 5 * time.Second

// rpcChecks asks one `criu swrk` process for CRIU's version, the features
// of names that FEATURE_CHECK answers (one request, one forked child), and
// `criu check` (CHECK, the last request: CRIU keeps the process open after
// VERSION and FEATURE_CHECK only, criu/cr-service.c chk_keepopen_req). It
// saves the process start-ups of `criu --version` and two feature runs, and
// two gatherings of the kernel facts when KerndatDir does not keep them.
//
// CHECK runs in a child that logs to the swrk's stderr at CRIU's warning
// level, as `criu check` does, so a failure carries CRIU's own message.
// FEATURE_CHECK only says yes or no: a feature it reports missing is left
// out of r.features and returned in rest, for `criu check --feature` to
// say why. rest also holds the names FEATURE_CHECK does not know. When the
// session itself fails (no answer, a protocol error), err says so and the
// caller runs the CLI instead.
//
// answered, if not nil, is called with rest as soon as FEATURE_CHECK has
// answered, before CHECK: its child has then gathered the kernel facts
// and saved them where CRIU keeps them (KerndatDir), so the `criu check
// --feature` runs for rest can go alongside CHECK instead of after it.
func rpcChecks(ctx context.Context, bin Binary, start starter, names []string, answered func(rest []string)) (r checkResults, rest []string, err error) {
	r.features = make(map[string]error, len(names))
	imgs, err := os.MkdirTemp("", "nodeshim-criu-check-")
	if err != nil {
		return r, nil, fmt.Errorf("criu swrk check: %w", err)
	}
	defer os.RemoveAll(imgs)
	// CRIU opens the images directory of a request through
	// /proc/<client pid>/fd/<images_dir_fd> (a path it must be able to
	// readlink), so the directory is held open here.
	dir, err := os.Open(imgs)
	if err != nil {
		return r, nil, fmt.Errorf("criu swrk check: %w", err)
	}
	defer dir.Close()
	s, err := startSwrkWith(bin, true, start)
	if err != nil {
		return r, nil, err
	}
	defer s.close(rpcCheckGrace)

	resp, err := s.call(ctx, &rpc.CriuReq{Type: rpc.CriuReqType_VERSION.Enum(), KeepOpen: proto.Bool(true)}, nil)
	if err != nil {
		return r, nil, fmt.Errorf("%s swrk: %w", bin.Path, err)
	}
	v := resp.GetVersion()
	r.version = Version{Major: int(v.GetMajorNumber()), Minor: int(v.GetMinorNumber()), Sublevel: int(v.GetSublevel())}

	ask := &rpc.CriuFeatures{}
	var asked []string
	for _, name := range names {
		field, ok := rpcFeatures[name]
		if !ok {
			rest = append(rest, name)
			continue
		}
		*field(ask) = proto.Bool(true)
		asked = append(asked, name)
	}
	if len(asked) > 0 {
		resp, err := s.call(ctx, &rpc.CriuReq{Type: rpc.CriuReqType_FEATURE_CHECK.Enum(), KeepOpen: proto.Bool(true), Features: ask}, nil)
		if err != nil && !errors.Is(err, ErrCriu) {
			return r, nil, fmt.Errorf("%s swrk feature check: %w", bin.Path, err)
		}
		// A failed FEATURE_CHECK (its child could not gather the kernel
		// facts) leaves the session open; the features are then asked on
		// the command line, for CRIU's message.
		got := resp.GetFeatures()
		if got == nil {
			got = &rpc.CriuFeatures{}
		}
		for _, name := range asked {
			if p := *rpcFeatures[name](got); p != nil && *p {
				r.features[name] = nil
			} else {
				rest = append(rest, name)
			}
		}
		if err == nil && answered != nil {
			answered(rest)
		}
	}

	_, err = s.call(ctx, &rpc.CriuReq{Type: rpc.CriuReqType_CHECK.Enum(), Opts: &rpc.CriuOpts{
		ImagesDirFd: proto.Int32(int32(dir.Fd())),
		LogFile:     proto.String(rpcCheckLog), LogLevel: proto.Int32(2),
	}}, nil)
	failed := errors.Is(err, ErrCriu)
	if err != nil && !failed {
		return r, nil, fmt.Errorf("%s swrk check: %w", bin.Path, err)
	}
	b, rerr := os.ReadFile(filepath.Join(imgs, rpcCheckLog))
	if rerr != nil {
		return r, nil, fmt.Errorf("%s swrk check: %w", bin.Path, rerr)
	}
	if failed {
		r.checkErr = fmt.Errorf("%s check: %w: %s", bin.Path, ErrCheckFailed, CheckMessage(string(b)))
		return r, rest, nil
	}
	// The verdict ("Looks good.") goes to stdout, which the swrk shares
	// with its children's errors and warnings; it is complete once the
	// swrk has exited.
	s.close(rpcCheckGrace)
	r.checkMsg = verdict(s.stderr.String())
	return r, rest, nil
}

// verdict is the last line of CRIU's output that is neither an error nor
// a warning: the message of a `criu check` that passed.
func verdict(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "Error") && !strings.HasPrefix(l, "Warn") {
			return l
		}
	}
	return "passed (no message)"
}
