package cri

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ErrNotRunning is returned, wrapped, for a container whose OCI state has
// no live process: stopped, or not yet created.
var ErrNotRunning = errors.New("the container has no process")

// ParseOCIState decodes the state document that an OCI runtime's `state`
// command prints (runtime-spec runtime.md, "State"), as runc and crun do.
func ParseOCIState(data []byte) (specs.State, error) {
	var st specs.State
	if err := json.Unmarshal(data, &st); err != nil {
		return specs.State{}, fmt.Errorf("decode OCI state: %w", err)
	}
	if st.ID == "" {
		return specs.State{}, errors.New("decode OCI state: no id")
	}
	return st, nil
}

// OCIStatePID returns the pid, in the host pid namespace, of the container
// id's init process as the OCI runtime binary (runc, crun, or a path) with
// state root root ("" for the runtime's default) reports it with
// `RUNTIME [--root ROOT] state ID`. A container that runc has created but
// not started has a pid: its init process waits for `runc start` in the
// container's namespaces.
func OCIStatePID(ctx context.Context, runtime, root, id string) (int, error) {
	var args []string
	if root != "" {
		args = append(args, "--root", root)
	}
	cmd := exec.CommandContext(ctx, runtime, append(args, "state", id)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("%s state %s: %w: %s", runtime, id, err, bytes.TrimSpace(stderr.Bytes()))
	}
	st, err := ParseOCIState(out)
	if err != nil {
		return 0, fmt.Errorf("%s state %s: %w", runtime, id, err)
	}
	if st.Status == specs.StateStopped || st.Pid <= 0 {
		return 0, fmt.Errorf("container %s is %s: %w", id, st.Status, ErrNotRunning)
	}
	return st.Pid, nil
}
