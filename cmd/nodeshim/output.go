package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// addOutputFlag adds kubectl's -o/--output flag with table as the default.
func addOutputFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVarP(dst, "output", "o", "table", "output format: table, json or yaml")
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
