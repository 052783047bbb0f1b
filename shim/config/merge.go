package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// File is one named configuration document, YAML or JSON.
type File struct {
	// Name identifies the document in errors, usually its path.
	Name string `json:"name"`
	// Data is the document's bytes.
	Data []byte `json:"data"`
}

// ErrNotObject is returned, wrapped with the file's name, for a document
// whose top level is not a mapping.
var ErrNotObject = errors.New("document is not a mapping")

// Merge applies files in order on top of base with the kubelet --config-dir
// semantics and returns the result as a new T; base is not modified.
//
// Each file is first decoded strictly into a T of its own, so that an
// unknown or duplicated field is an error naming the file and the field;
// an empty file (or one holding only comments) is skipped. The documents
// are then merged as JSON merge patches (RFC 7386), as kubelet does: a
// struct is merged field by field, a map key by key, a list is replaced as
// a whole, so a map[string][]string replaces the list of each key it names.
func Merge[T any](base T, files ...File) (T, error) {
	var zero T
	baseJSON, err := json.Marshal(base)
	if err != nil {
		return zero, fmt.Errorf("encode base configuration: %w", err)
	}
	var merged any
	if err := json.Unmarshal(baseJSON, &merged); err != nil {
		return zero, fmt.Errorf("decode base configuration: %w", err)
	}
	for _, f := range files {
		patch, err := documentJSON[T](f)
		if err != nil {
			return zero, err
		}
		if patch == nil {
			continue
		}
		merged = mergePatch(merged, patch)
	}
	out, err := json.Marshal(merged)
	if err != nil {
		return zero, fmt.Errorf("encode merged configuration: %w", err)
	}
	var result T
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&result); err != nil {
		return zero, fmt.Errorf("decode merged configuration: %w", err)
	}
	return result, nil
}

// documentJSON checks f strictly against T and returns its top-level
// mapping, or nil for an empty document.
func documentJSON[T any](f File) (map[string]any, error) {
	j, err := yaml.YAMLToJSON(f.Data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	var probe T
	if err := yaml.UnmarshalStrict(f.Data, &probe); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	var doc any
	if err := json.Unmarshal(j, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: %w", f.Name, ErrNotObject)
	}
	return m, nil
}

// mergePatch applies patch to target per RFC 7386 and returns the result.
// target is never modified: changed mappings are copied.
func mergePatch(target any, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	out := make(map[string]any, len(tm)+len(pm))
	if ok {
		for k, v := range tm {
			out[k] = v
		}
	}
	for k, v := range pm {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = mergePatch(out[k], v)
	}
	return out
}

// DropinSuffix is the file name suffix of drop-in files.
const DropinSuffix = ".conf"

// ReadDropins reads the drop-in files of dir: regular files (symlinks
// followed) named *.conf, not starting with a dot, in lexical byte order as
// kubelet applies them. A directory that does not exist holds no drop-ins.
func ReadDropins(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read drop-in directory %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, DropinSuffix) {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names) // byte order, not locale order
	files := make([]File, 0, len(names))
	for _, n := range names {
		p := filepath.Join(dir, n)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("stat drop-in %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read drop-in %s: %w", p, err)
		}
		files = append(files, File{Name: p, Data: data})
	}
	return files, nil
}
