// Package dockerfile reads what the tests and the test harnesses take from
// the repository's Dockerfile: the `go build` command of each binary of
// the image and the defaults of its build arguments, so that what they
// build is what the image builds.
package dockerfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// GoBuild finds the RUN instruction of the Dockerfile text whose `go
// build` ends with pkg and returns its environment assignments and go
// build's arguments, with ${VAR} expanded from vars.
func GoBuild(text string, vars map[string]string, pkg string) (env, args []string, err error) {
	text = strings.ReplaceAll(text, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "RUN ")
		if !ok || !strings.Contains(cmd, "go build") {
			continue
		}
		words, err := Words(os.Expand(cmd, func(k string) string { return vars[k] }))
		if err != nil {
			return nil, nil, err
		}
		if len(words) == 0 || words[len(words)-1] != pkg {
			continue
		}
		for i, w := range words {
			if w == "go" {
				if i+1 >= len(words) || words[i+1] != "build" {
					break
				}
				return words[:i], words[i+2:], nil
			}
			if !strings.Contains(w, "=") {
				return nil, nil, errors.New("unexpected word before go build: " + w)
			}
		}
	}
	return nil, nil, errors.New("no RUN ... go build ... " + pkg)
}

// Arg is the default value of the Dockerfile text's `ARG name=value`,
// unquoted.
func Arg(text, name string) (string, error) {
	for _, line := range strings.Split(text, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "ARG "+name+"=")
		if !ok {
			continue
		}
		words, err := Words(v)
		if err != nil || len(words) != 1 {
			return "", fmt.Errorf("ARG %s=%s: want one word (%v)", name, v, err)
		}
		return words[0], nil
	}
	return "", errors.New("no ARG " + name + "=")
}

// Words splits a command line on blanks, honouring double and single
// quotes, which is all the Dockerfile's build commands use.
func Words(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote in " + s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
