package restoring

import (
	"fmt"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrUsage: a command line the wrapper must act on (create, start) does
// not parse as runc's.
var ErrUsage = errdefs.New(errdefs.ErrInvalidArgument, "runc command line not understood")

// Call is a runc command line as containerd's runc shim writes it:
// global flags, the command, its flags and the container id.
type Call struct {
	// Global are the global flags as given, in order (each flag with its
	// value as one or two words, as it came).
	Global []string
	// Root, Log and LogFormat are the values of --root, --log and
	// --log-format ("" when absent).
	Root, Log, LogFormat string
	// Command is the subcommand ("create", "start", ...); "" when there
	// is none (runc --version).
	Command string
	// Bundle, PidFile and ConsoleSocket are create's --bundle, --pid-file
	// and --console-socket.
	Bundle, PidFile, ConsoleSocket string
	// NoPivot and NoNewKeyring are create's --no-pivot and
	// --no-new-keyring.
	NoPivot, NoNewKeyring bool
	// ID is the container id: the command's one positional argument.
	ID string
}

// runc's global flags that take a value (runc main.go).
var globalValue = map[string]bool{"--log": true, "--log-format": true, "--root": true, "--criu": true, "--rootless": true}

// create's flags that take a value (runc create.go).
var createValue = map[string]bool{"--bundle": true, "-b": true, "--console-socket": true, "--pidfd-socket": true, "--pid-file": true, "--preserve-fds": true}

// ParseCall parses args (os.Args[1:]) as a runc command line. Flags are
// "--name value" or "--name=value". Only what the wrapper acts on is
// interpreted: the global flags before the command, and for create,
// start and delete their flags and id. Any other command is returned with Command
// set and the rest uninterpreted, since it is passed to the runtime as is.
func ParseCall(args []string) (Call, error) {
	var c Call
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		name, val, hasVal := strings.Cut(a, "=")
		c.Global = append(c.Global, a)
		if !globalValue[name] {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return c, fmt.Errorf("%w: %s needs a value", ErrUsage, name)
			}
			i++
			val = args[i]
			c.Global = append(c.Global, val)
		}
		switch name {
		case "--root":
			c.Root = val
		case "--log":
			c.Log = val
		case "--log-format":
			c.LogFormat = val
		}
	}
	if i == len(args) {
		return c, nil
	}
	c.Command = args[i]
	if c.Command != "create" && c.Command != "start" && c.Command != "delete" {
		return c, nil
	}
	var pos []string
	for i++; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if c.Command == "create" && createValue[name] && !hasVal {
			if i+1 >= len(args) {
				return c, fmt.Errorf("%w: %s %s needs a value", ErrUsage, c.Command, name)
			}
			i++
			val = args[i]
		}
		switch name {
		case "--bundle", "-b":
			c.Bundle = val
		case "--pid-file":
			c.PidFile = val
		case "--console-socket":
			c.ConsoleSocket = val
		case "--no-pivot":
			c.NoPivot = true
		case "--no-new-keyring":
			c.NoNewKeyring = true
		}
	}
	if len(pos) != 1 || pos[0] == "" {
		return c, fmt.Errorf("%w: %s wants one container id, got %q", ErrUsage, c.Command, pos)
	}
	if !validID(pos[0]) {
		return c, fmt.Errorf("%w: container id %q is not runc's grammar", ErrUsage, pos[0])
	}
	c.ID = pos[0]
	return c, nil
}

// validID is runc's container id grammar (^[\w+-\.]+$), without the
// names "." and "..", which would name the root itself or its parent.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 1024 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
