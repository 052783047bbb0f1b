package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// outputFormats are the values of -o/--output, kubectl's output flag, on
// every command that has it.
var outputFormats = []string{"table", "json", "yaml"}

// outputUsage is the help of -o/--output.
const outputUsage = "output format: table, json or yaml"

// addOutputFlag adds kubectl's -o/--output flag with table as the default.
func addOutputFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVarP(dst, "output", "o", "table", outputUsage)
}

// writeOutput writes v to w as JSON or YAML, or the text that table returns.
func writeOutput(w io.Writer, format string, v any, table func() string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	case "table", "":
		_, err := io.WriteString(w, table())
		return err
	default:
		return withExitCode(exitUsage, fmt.Errorf("unknown output format %q (want table, json or yaml)", format))
	}
}

// deprecatedAnnotation marks a flag kept only so that scripts written for
// an older spelling still work; its value is the spelling to use instead.
// warnDeprecated prints it when the flag is given.
const deprecatedAnnotation = "nodeshim.io/deprecated-use"

// addDeprecatedAlias adds name (with shorthand, "" for none) as a hidden
// spelling of the string flag now, which must already be defined: it sets
// the same value, and giving it prints a one-line deprecation warning.
func addDeprecatedAlias(fs *pflag.FlagSet, name, shorthand, now string) {
	f := fs.Lookup(now)
	if f == nil {
		panic("nodeshim: alias --" + name + " of the undefined flag --" + now)
	}
	fs.VarPF(f.Value, name, shorthand, f.Usage)
	markDeprecated(fs, name, flagSpelling(f))
}

// markDeprecated hides the defined flag name and has warnDeprecated name
// the spelling to use instead.
func markDeprecated(fs *pflag.FlagSet, name, use string) {
	if err := fs.SetAnnotation(name, deprecatedAnnotation, []string{use}); err != nil {
		panic("nodeshim: " + err.Error())
	}
	if err := fs.MarkHidden(name); err != nil {
		panic("nodeshim: " + err.Error())
	}
}

// flagSpelling is how help and warnings name f: "-o/--output".
func flagSpelling(f *pflag.Flag) string {
	if f.Shorthand != "" {
		return "-" + f.Shorthand + "/--" + f.Name
	}
	return "--" + f.Name
}

// formatOrFile is -o/--output on a command where it used to name the file
// written (seccomp compile, checkpoint image): a value that is an output
// format sets the format, any other value is the older spelling of the
// file, which still works, with a deprecation warning.
type formatOrFile struct {
	format *string
	// legacy is the file given with -o/--output, if any; fileFlag names
	// the flag to use instead, which resolveDeprecated sets to it.
	legacy   string
	fileFlag string
}

// addFormatOrFileFlag adds -o/--output as a formatOrFile over format;
// fileFlag is the name of the flag that names the file written.
func addFormatOrFileFlag(cmd *cobra.Command, format *string, fileFlag string) {
	*format = "table"
	cmd.Flags().VarP(&formatOrFile{format: format, fileFlag: fileFlag}, "output", "o", outputUsage)
}

func (v *formatOrFile) String() string { return *v.format }
func (v *formatOrFile) Type() string   { return "string" }

func (v *formatOrFile) Set(s string) error {
	if slices.Contains(outputFormats, s) {
		*v.format = s
		return nil
	}
	if s == "" {
		return errors.New("empty output format (want table, json or yaml)")
	}
	v.legacy = s
	return nil
}

// resolveDeprecated prints, on cmd's stderr, one line for each deprecated
// spelling given on its command line, and hands a file given with
// -o/--output FILE to the flag that replaces it, refusing a file given
// twice.
func resolveDeprecated(cmd *cobra.Command) error {
	var err error
	w := cmd.ErrOrStderr()
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if use := f.Annotations[deprecatedAnnotation]; len(use) > 0 {
			fmt.Fprintf(w, "Flag %s has been deprecated, use %s\n", flagSpelling(f), strings.Join(use, ", "))
		}
		v, ok := f.Value.(*formatOrFile)
		if !ok || v.legacy == "" {
			return
		}
		fmt.Fprintf(w, "Flag %s FILE has been deprecated, use --%s FILE (%s is the output format: table, json or yaml)\n",
			flagSpelling(f), v.fileFlag, flagSpelling(f))
		ff := cmd.Flags().Lookup(v.fileFlag)
		switch {
		case ff == nil:
			err = fmt.Errorf("nodeshim: -o/--output FILE stands for the undefined flag --%s", v.fileFlag)
		case ff.Changed && ff.Value.String() != v.legacy:
			err = withExitCode(exitUsage, fmt.Errorf("the file is given twice, as --%s %s and %s %s: give --%s alone",
				v.fileFlag, ff.Value.String(), flagSpelling(f), v.legacy, v.fileFlag))
		default:
			err = ff.Value.Set(v.legacy)
		}
	})
	return err
}
