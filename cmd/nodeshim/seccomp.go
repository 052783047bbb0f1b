package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/spf13/cobra"
)

// newSeccompCommand is the `nodeshim seccomp` group: validate, compile,
// verify, run under, record seccomp profiles, and show a pod's effective
// ones (package kernel/seccomp).
func newSeccompCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "seccomp",
		Short: "Validate, compile, verify, record seccomp profiles and show a pod's",
		Long: `Work with the seccomp profiles that Kubernetes containers run under.

Profiles are OCI runtime-spec seccomp JSON (what a Localhost profile under
<kubelet root-dir>/seccomp contains) or the Docker/moby profile shape, which is
resolved for this node (architecture, capabilities, kernel version) first.

Profiles are compiled with libseccomp for the native architecture plus the
profile's architectures. When the default action denies, the program starts
with a prefix that answers ENOSYS for syscalls newer than the profile, so that
libc falls back to older calls instead of failing with the default errno.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(
		newSeccompCheckCommand(),
		newSeccompCompileCommand(),
		newSeccompVerifyCommand(),
		newSeccompExecCommand(),
		newSeccompRecordCommand(),
		newSeccompEffectiveCommand(),
		newSeccompComplaintsCommand(),
	)
	return cmd
}

// profileFlags are the flags every seccomp subcommand reading a profile has.
type profileFlags struct {
	caps     []string
	optimize string
	noENOSYS bool
}

func (pf *profileFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&pf.caps, "cap", nil, "capabilities of the container, for a moby profile's includes/excludes (default: containerd's default set)")
	cmd.Flags().StringVar(&pf.optimize, "optimize", "auto", "filter layout: auto (binary tree when libseccomp has it), tree or linear")
	cmd.Flags().BoolVar(&pf.noENOSYS, "no-enosys", false, "leave out the ENOSYS prefix for syscalls newer than the profile")
}

// load reads, validates and compiles a profile; it gives up when ctx is
// done (SIGTERM, SIGINT). Warnings go to the log.
func (pf *profileFlags) load(ctx context.Context, path string) (*seccomp.Profile, *seccomp.Filter, error) {
	opt, err := seccomp.ParseOptimize(pf.optimize)
	if err != nil {
		return nil, nil, withExitCode(exitUsage, err)
	}
	p, f, err := seccomp.LoadFile(ctx, path, seccomp.NodeParseOptions(pf.caps), seccomp.CompileOptions{Optimize: opt, NoENOSYS: pf.noENOSYS})
	if err != nil {
		return nil, nil, err
	}
	for _, w := range append(append([]seccomp.Warning(nil), f.Warnings...), f.Skipped...) {
		slog.Warn("seccomp profile", "profile", path, "path", w.Path, "warning", w.Message)
	}
	return p, f, nil
}

func newSeccompCheckCommand() *cobra.Command {
	var pf profileFlags
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:   "check PROFILE",
		Short: "Validate a profile and print what it does with every syscall",
		Long: `Validate a seccomp profile and print its meaning on this node: for every
syscall of the native architecture, the action, the conditions on arguments,
and whether a rule, the default action or the ENOSYS prefix decides.

Validation errors name the JSON path (for example syscalls[12].args[0].op).
Syscall names unknown to libseccomp or to this architecture are skipped with a
warning, as runc does. The table shows the syscalls the rules name and a count
of what the default covers; --all or -o json|yaml list every syscall.`,
		Example: `  # Validate a Localhost profile
  nodeshim seccomp check /var/lib/kubelet/seccomp/profiles/audit.json

  # Every syscall with its action, as JSON
  nodeshim seccomp check profile.json -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, f, err := pf.load(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ex, err := seccomp.Explain(p, f)
			if err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), output, ex, func() string {
				var b strings.Builder
				fmt.Fprintf(&b, "profile %s (%s shape): valid\n", args[0], p.Shape)
				fmt.Fprintf(&b, "default action %s; architectures %s\n", ex.Default, strings.Join(f.Arches, ","))
				fmt.Fprintf(&b, "%d syscalls decided by rules, %d by the default action, %d by the ENOSYS prefix\n\n", ex.ByRule, ex.ByDefault, ex.ByENOSYS)
				tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SYSCALL\tNR\tACTION\tSOURCE")
				var byDefault []string
				for _, m := range ex.Syscalls {
					if m.Source != "rule" && !all {
						if m.Source == "default" {
							byDefault = append(byDefault, m.Syscall)
						}
						continue
					}
					src := m.Source
					if len(m.Rules) > 0 {
						src = strings.Join(m.Rules, ",")
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", m.Syscall, m.Nr, m.Action, src)
				}
				tw.Flush()
				if len(byDefault) > 0 {
					fmt.Fprintf(&b, "\ndefault action %s covers: %s\n", ex.Default, strings.Join(byDefault, " "))
				}
				for _, a := range f.ENOSYS {
					fmt.Fprintf(&b, "ENOSYS prefix covers every syscall number above %d on %s\n", a.MaxNr, a.Name)
				}
				for _, w := range ex.Warnings {
					fmt.Fprintf(&b, "warning: %s\n", w)
				}
				return b.String()
			})
		},
	}
	pf.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVar(&all, "all", false, "list every syscall in the table, not only those the rules name")
	return cmd
}

// compileSummary is the machine-readable form of `seccomp compile`.
type compileSummary struct {
	Profile  string          `json:"profile"`
	Output   string          `json:"output,omitempty"`
	Library  string          `json:"libseccomp"`
	Duration string          `json:"duration"`
	Filter   *seccomp.Filter `json:"filter"`
}

func newSeccompCompileCommand() *cobra.Command {
	var pf profileFlags
	var out, format string
	var disasm bool
	cmd := &cobra.Command{
		Use:   "compile PROFILE [--out-file FILE]",
		Short: "Compile a profile to a raw BPF program",
		Long: `Compile a seccomp profile with libseccomp and print a summary: rules,
syscalls, instructions, architectures, the ENOSYS prefix and skipped names.

With --out-file FILE the raw program (struct sock_filter array in host byte
order, what seccomp(SECCOMP_SET_MODE_FILTER) loads) is written to FILE, which
must not exist yet. --disasm prints the program instruction by instruction.
-o/--output is the summary's format.`,
		Example: `  # Compile with the binary tree and write the program
  nodeshim seccomp compile profile.json --out-file filter.bpf

  # The summary as JSON
  nodeshim seccomp compile profile.json -o json

  # Show the linear layout's instructions
  nodeshim seccomp compile profile.json --optimize linear --disasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			_, f, err := pf.load(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			took := time.Since(start)
			if out != "" {
				if err := atomicfile.WriteNew(out, seccomp.EncodeProgram(f.Program), 0o644); err != nil {
					return err
				}
			}
			sum := compileSummary{Profile: args[0], Output: out, Library: seccomp.LibraryVersion(), Duration: took.String(), Filter: f}
			return writeOutput(cmd.OutOrStdout(), format, sum, func() string {
				var b strings.Builder
				fmt.Fprintf(&b, "profile %s compiled in %v (libseccomp %s, %s)\n", args[0], took.Round(time.Microsecond), sum.Library, f.OptimizeName)
				fmt.Fprintf(&b, "architectures: %s\n", strings.Join(f.Arches, ","))
				fmt.Fprintf(&b, "default: %s; rules: %d; syscalls: %d\n", f.Default, f.Rules, f.Syscalls)
				fmt.Fprintf(&b, "instructions: %d (ENOSYS prefix %d)\n", f.Instructions, f.StubInstructions)
				for _, a := range f.ENOSYS {
					fmt.Fprintf(&b, "ENOSYS above syscall %d on %s\n", a.MaxNr, a.Name)
				}
				for _, w := range f.Skipped {
					fmt.Fprintf(&b, "skipped: %s\n", w)
				}
				if out != "" {
					fmt.Fprintf(&b, "wrote %d bytes to %s\n", len(f.Program)*8, out)
				}
				if disasm {
					b.WriteString("\n")
					b.WriteString(seccomp.Disassemble(f.Program))
				}
				return b.String()
			})
		},
	}
	pf.add(cmd)
	cmd.Flags().StringVar(&out, "out-file", "", "write the raw BPF program to this new file")
	// -o FILE and --format FORMAT are the spellings before -o was the
	// format on every command.
	addFormatOrFileFlag(cmd, &format, "out-file")
	cmd.Flags().StringVar(&format, "format", "table", outputUsage)
	markDeprecated(cmd.Flags(), "format", "-o/--output")
	cmd.Flags().BoolVar(&disasm, "disasm", false, "print the program's instructions")
	return cmd
}

func newSeccompVerifyCommand() *cobra.Command {
	var pf profileFlags
	var output string
	var sample int
	var timeout time.Duration
	var all bool
	cmd := &cobra.Command{
		Use:   "verify PROFILE",
		Short: "Prove on this kernel that the compiled profile does what it says",
		Long: `Run child processes under the compiled filter that call every syscall the
profile names (and a sample of those it does not) with harmless invalid
arguments, and compare the kernel's answers with the profile's meaning.

Each syscall is first called without a filter for a baseline. Allowed syscalls
must answer as they do unfiltered, denied ones exactly the profile's errno,
kill actions must end the child with SIGSYS, TRAP must raise SIGSYS, TRACE and
NOTIFY (no tracer or listener attached) answer ENOSYS, and syscalls above the
ENOSYS prefix's limit answer ENOSYS. Conditional rules are probed with values
on both sides of each comparison.

A probe is inconclusive when the syscall answers the same without the filter.
Exit code 3 when any probe disagrees with the profile.`,
		Example: `  # Verify a profile, show only mismatches and a summary
  nodeshim seccomp verify profile.json

  # Every probe, as JSON
  nodeshim seccomp verify profile.json -o json --sample 64`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, f, err := pf.load(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel func()
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			rep, err := seccomp.Verify(ctx, p, f, seccomp.VerifyOptions{Sample: sample})
			if err != nil {
				return err
			}
			err = writeOutput(cmd.OutOrStdout(), output, rep, func() string {
				var b strings.Builder
				tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SYSCALL\tARCH\tNR\tWHY\tARGS\tEXPECTED\tOBSERVED\tBASELINE\tSTATUS")
				for _, r := range rep.Results {
					if !all && r.Status != seccomp.StatusMismatch {
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Syscall, r.Arch, r.Nr, r.Why, shortArgs(r.Args), r.Expected, r.Observed, r.Baseline, r.Status)
				}
				tw.Flush()
				for _, r := range rep.Results {
					if r.Syscall == "*" {
						fmt.Fprintf(&b, "\nnot verified (%s): %s\n", r.Arch, r.Detail)
					}
				}
				fmt.Fprintf(&b, "\n%s: %d probes in %d children under the filter: %d ok, %d mismatches, %d inconclusive, %d not probed\n",
					args[0], rep.Probed, rep.Children, rep.OK, rep.Mismatches, rep.Inconclusive, rep.NotProbed)
				return b.String()
			})
			if err != nil {
				return err
			}
			if rep.Mismatches > 0 {
				return withExitCode(exitProblem, fmt.Errorf("%s: %d probes disagree with the profile", args[0], rep.Mismatches))
			}
			return nil
		},
	}
	pf.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().IntVar(&sample, "sample", 32, "how many syscalls the profile does not name to probe too (negative: none)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long (a probe that blocks)")
	cmd.Flags().BoolVar(&all, "all", false, "list every probe in the table, not only mismatches")
	return cmd
}

func shortArgs(args []string) string {
	if len(args) == 0 {
		return "-"
	}
	out := make([]string, len(args))
	for i, a := range args {
		if a == "0xffffffffffffffff" {
			a = "-1"
		}
		out[i] = a
	}
	return strings.Join(out, ",")
}

func newSeccompExecCommand() *cobra.Command {
	var pf profileFlags
	var profile string
	cmd := &cobra.Command{
		Use:   "exec --profile PROFILE -- COMMAND [ARGS...]",
		Short: "Run a command under a seccomp profile",
		Long: `Validate and compile PROFILE, then replace nodeshim with COMMAND running
under it, as a container runtime would: no_new_privs is set and the filter is
loaded with SECCOMP_FILTER_FLAG_TSYNC before COMMAND is executed.

nodeshim re-executes itself to load the filter in a process that has a single
thread and runs nothing between loading the filter and execve(2), so even a
strict profile only has to allow execve. The pid does not change: COMMAND runs
as the process that was started as nodeshim. Its exit status is COMMAND's.
Nothing is installed and COMMAND does not run when the profile is invalid or
does not compile (exit 1), or when COMMAND is not found (exit 127). If the
filter cannot be loaded, or the profile denies execve, the exit code is 126.
Before loading it, nodeshim proves on this kernel, in probe processes as
seccomp verify does, that the filter allows the two syscalls made under it:
execve, and exit_group (which ends the process with 126 when execve fails);
a profile that denies either is refused with exit 126, naming the syscall
and the kernel's answer, and COMMAND does not run.

COMMAND is looked up in PATH. Profiles with SCMP_ACT_NOTIFY rules are refused:
handing the listener to a seccomp agent is a container runtime's job.`,
		Example: `  # mkdir fails with EACCES under a profile that denies it
  nodeshim seccomp exec --profile deny-mkdir.json -- mkdir /tmp/x

  # Run a shell under the node's RuntimeDefault-like profile
  nodeshim seccomp exec --profile /var/lib/kubelet/seccomp/runtime-default.json -- sh -c 'uname -a'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if profile == "" {
				return withExitCode(exitUsage, errors.New("--profile is required"))
			}
			path, err := exec.LookPath(args[0])
			if err != nil {
				return withExitCode(127, fmt.Errorf("command %s: %w", args[0], err))
			}
			_, f, err := pf.load(cmd.Context(), profile)
			if err != nil {
				return err
			}
			slog.Debug("seccomp exec", "profile", profile, "command", path, "instructions", f.Instructions)
			err = seccomp.Exec(cmd.Context(), f, path, args, os.Environ())
			if errors.Is(err, seccomp.ErrExecDenied) {
				return withExitCode(126, fmt.Errorf("profile %s: %w", profile, err))
			}
			return err
		},
	}
	pf.add(cmd)
	cmd.Flags().StringVar(&profile, "profile", "", "the seccomp profile to run COMMAND under (required)")
	return cmd
}
