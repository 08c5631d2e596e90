// Package override applies operators' policy overrides: Ironic-format
// YAML files from a policy.d directory or an uploaded zip, validated
// whole before anything changes, stored in the database so every replica
// applies the same set, with a status line that says what is in force.
package override

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/anvilproject/anvil/policies"
)

// Limits against hostile archives.
const (
	MaxZipBytes   = 1 << 20   // compressed upload
	MaxTotalBytes = 4 << 20   // all files, uncompressed
	MaxFileBytes  = 256 << 10 // one file, uncompressed
	MaxFiles      = 100
)

// Files maps a flattened file name to its content.
type Files map[string][]byte

func isPolicyFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".tpl", ".tmpl", ".j2":
		return true
	}
	return false
}

func isTemplate(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".tpl", ".tmpl", ".j2":
		return true
	}
	return false
}

// ReadZip unpacks an upload: folders are flattened away, files that are
// not policy files are ignored, and anything hostile fails the whole zip.
func ReadZip(data []byte) (Files, error) {
	if len(data) > MaxZipBytes {
		return nil, fmt.Errorf("the zip is %d bytes; at most %d", len(data), MaxZipBytes)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("not a valid zip: %v", err)
	}
	if len(zr.File) > MaxFiles*4 {
		return nil, fmt.Errorf("the zip holds %d entries; at most %d", len(zr.File), MaxFiles*4)
	}
	out := Files{}
	from := map[string]string{}
	total := 0
	for _, f := range zr.File {
		name := f.Name
		switch {
		case strings.HasPrefix(name, "/") || strings.HasPrefix(name, "\\") || filepath.IsAbs(name) || (len(name) > 1 && name[1] == ':'):
			return nil, fmt.Errorf("%s: absolute paths are not allowed", name)
		case slices.Contains(strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }), ".."):
			return nil, fmt.Errorf("%s: path traversal is not allowed", name)
		case f.Mode()&os.ModeSymlink != 0:
			return nil, fmt.Errorf("%s: symbolic links are not allowed", name)
		case f.FileInfo().IsDir():
			continue
		}
		base := path.Base(strings.ReplaceAll(name, "\\", "/"))
		if !isPolicyFile(base) {
			continue
		}
		if prev, dup := from[base]; dup {
			return nil, fmt.Errorf("%s and %s both flatten to %s", prev, name, base)
		}
		if len(out) >= MaxFiles {
			return nil, fmt.Errorf("more than %d policy files", MaxFiles)
		}
		if f.UncompressedSize64 > MaxFileBytes {
			return nil, fmt.Errorf("%s: %d bytes; at most %d per file", name, f.UncompressedSize64, MaxFileBytes)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		// Read one byte past the limit: the header's size may lie.
		b, err := io.ReadAll(io.LimitReader(rc, MaxFileBytes+1))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		if len(b) > MaxFileBytes {
			return nil, fmt.Errorf("%s: larger than %d bytes", name, MaxFileBytes)
		}
		if total += len(b); total > MaxTotalBytes {
			return nil, fmt.Errorf("the files add up to more than %d bytes", MaxTotalBytes)
		}
		from[base] = name
		out[base] = b
	}
	return out, nil
}

// ReadDir reads the policy files of a policy.d directory (not its
// subdirectories). A missing directory holds no files.
func ReadDir(dir string) (Files, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return Files{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := Files{}
	for _, e := range ents {
		if e.IsDir() || !isPolicyFile(e.Name()) || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if len(b) > MaxFileBytes {
			return nil, fmt.Errorf("%s: larger than %d bytes", e.Name(), MaxFileBytes)
		}
		out[e.Name()] = b
	}
	return out, nil
}

// Digest identifies a set of files, to notice a changed directory.
func (f Files) Digest() string {
	h := sha256.New()
	for _, n := range f.Names() {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(f[n]))
		h.Write(f[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Names are the file names in lexical order, the order they merge in.
func (f Files) Names() []string {
	out := make([]string, 0, len(f))
	for n := range f {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TemplateData is what .tpl, .tmpl and .j2 files may use:
// {{ .Default "rule" }} is a rule's default check string, and .Roles the
// four role names, so an override can extend a default instead of
// copying it.
type TemplateData struct {
	Roles []string
}

// Default returns a rule's default check string ("" if unknown).
func (TemplateData) Default(rule string) string {
	for _, r := range policies.Defaults() {
		if r.Name == rule {
			return r.Check
		}
	}
	return ""
}

// parseYAML reads one file as a flat map of rule name to check string,
// refusing aliases and custom tags so no file can expand or execute.
func parseYAML(name string, b []byte) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %v", name, err)
	}
	if doc.Kind == 0 {
		return map[string]string{}, nil // empty file
	}
	var walk func(n *yaml.Node) error
	walk = func(n *yaml.Node) error {
		if n.Kind == yaml.AliasNode || n.Anchor != "" {
			return fmt.Errorf("%s: line %d: anchors and aliases are not allowed", name, n.Line)
		}
		if n.Tag != "" && !strings.HasPrefix(n.Tag, "!!") {
			return fmt.Errorf("%s: line %d: custom tag %s is not allowed", name, n.Line, n.Tag)
		}
		for _, c := range n.Content {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(&doc); err != nil {
		return nil, err
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: must be a mapping of rule name to check string", name)
	}
	out := map[string]string{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s: line %d: %q must map to a check string", name, k.Line, k.Value)
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("%s: line %d: rule %q appears twice", name, k.Line, k.Value)
		}
		out[k.Value] = v.Value
	}
	return out, nil
}

// Rules merges the files over one another in lexical order, rendering
// templates first, and validates the result against the defaults. The
// error names the file and the problem.
func Rules(files Files) (map[string]string, error) {
	merged := map[string]string{}
	source := map[string]string{}
	for _, n := range files.Names() {
		b := files[n]
		if isTemplate(n) {
			var err error
			if b, err = render(n, b); err != nil {
				return nil, err
			}
		}
		rules, err := parseYAML(n, b)
		if err != nil {
			return nil, err
		}
		for k, v := range rules {
			if err := policies.Validate(policies.Defaults(), map[string]string{k: v}); err != nil && !strings.Contains(err.Error(), "undefined rule") {
				return nil, fmt.Errorf("%s: %v", n, err)
			}
			merged[k], source[k] = v, n
		}
	}
	if err := policies.Validate(policies.Defaults(), merged); err != nil {
		return nil, err
	}
	return merged, nil
}
