package kernel

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoConfig is returned by LoadConfig when none of the usual places holds
// the running kernel's configuration.
var ErrNoConfig = errors.New("no kernel config found")

// maxConfigSize bounds a decompressed kernel config; real ones are a few
// hundred KiB, so anything larger is not a kernel config (or a gzip bomb).
const maxConfigSize = 8 << 20

// configReadHint is the buffer a config is read into at first.
const configReadHint = 320 << 10

// Tristate is the state of a kernel config option.
type Tristate string

// The states of a config option. Value-type options (strings, numbers) that
// are set count as Yes.
const (
	Yes    Tristate = "y"
	Module Tristate = "m"
	Unset  Tristate = "unset"
)

// Config is a kernel configuration (.config) as the kernel was built with.
type Config struct {
	// Source is the file it was read from.
	Source string `json:"source"`
	// Options maps CONFIG_ names to their values: "y", "m", a number or a
	// quoted string. Options written as "# CONFIG_X is not set" are absent.
	Options map[string]string `json:"-"`
}

// Get returns the state of the option name, with or without its CONFIG_
// prefix.
func (c *Config) Get(name string) Tristate {
	v, ok := c.Value(name)
	switch {
	case !ok || v == "n":
		return Unset
	case v == "m":
		return Module
	default:
		return Yes
	}
}

// Value returns the raw value of the option name and whether it is set.
func (c *Config) Value(name string) (string, bool) {
	if c == nil {
		return "", false
	}
	if !strings.HasPrefix(name, "CONFIG_") {
		name = "CONFIG_" + name
	}
	v, ok := c.Options[name]
	return v, ok
}

// ConfigPaths returns the places where the config of kernel release is
// looked for, in order: /proc/config.gz (CONFIG_IKCONFIG_PROC), then
// /boot/config-RELEASE, then /lib/modules/RELEASE/config.
func ConfigPaths(h *Host, release string) []string {
	return []string{
		filepath.Join(h.ProcRoot, "config.gz"),
		filepath.Join(h.BootRoot, "config-"+release),
		filepath.Join(h.ModulesRoot, release, "config"),
	}
}

// LoadConfig reads the configuration of the kernel release from the first
// of ConfigPaths that exists. It returns an error wrapping ErrNoConfig when
// none does.
func LoadConfig(h *Host, release string) (*Config, error) {
	paths := ConfigPaths(h, release)
	for _, p := range paths {
		c, err := ReadConfigFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return c, err
	}
	return nil, fmt.Errorf("%w at %s", ErrNoConfig, strings.Join(paths, ", "))
}

// RunningConfig reads the configuration of the kernel h runs: its
// release from h's procfs, then LoadConfig.
func RunningConfig(h *Host) (*Config, error) {
	id, err := ReadIdentity(h.ProcRoot)
	if err != nil {
		return nil, err
	}
	return LoadConfig(h, id.Raw)
}

// HZ returns CONFIG_HZ, the kernel's tick rate; an error names the config
// file when it is missing or not a number.
func (c *Config) HZ() (int, error) {
	v, ok := c.Value("HZ")
	if !ok {
		return 0, fmt.Errorf("%s: no CONFIG_HZ", c.Source)
	}
	hz, err := strconv.Atoi(v)
	if err != nil || hz <= 0 {
		return 0, fmt.Errorf("%s: CONFIG_HZ=%s is not a tick rate", c.Source, v)
	}
	return hz, nil
}

// ReadConfigFile reads a kernel config file, gzip-compressed or plain.
func ReadConfigFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read kernel config %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read kernel config %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	// Real configs are 150-300 KiB; growing from io.ReadAll's 512 bytes
	// costs more than the parse.
	var buf bytes.Buffer
	buf.Grow(configReadHint)
	if _, err := buf.ReadFrom(io.LimitReader(r, maxConfigSize+1)); err != nil {
		return nil, fmt.Errorf("read kernel config %s: %w", path, err)
	}
	if buf.Len() > maxConfigSize {
		return nil, fmt.Errorf("read kernel config %s: larger than %d bytes", path, maxConfigSize)
	}
	opts, err := ParseConfig(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("read kernel config %s: %w", path, err)
	}
	return &Config{Source: path, Options: opts}, nil
}

// ParseConfig parses the text of a kernel .config: "CONFIG_X=value" lines,
// "# CONFIG_X is not set" lines (left out of the result), other comments and
// blank lines. Any other line is an error naming its number.
func ParseConfig(b []byte) (map[string]string, error) {
	// One string for the whole text: names and values are substrings of
	// it, so the map costs no allocation per option.
	text := string(b)
	opts := make(map[string]string, strings.Count(text, "\nCONFIG_")+1)
	for n := 1; text != ""; n++ {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "CONFIG_") || !validConfigName(name) {
			return nil, fmt.Errorf("line %d: not a config option: %.60q", n, line)
		}
		opts[name] = value
	}
	return opts, nil
}

func validConfigName(name string) bool {
	if len(name) <= len("CONFIG_") {
		return false
	}
	for _, c := range []byte(name) {
		if !(c == '_' || isDigit(c) || ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z')) {
			return false
		}
	}
	return true
}
