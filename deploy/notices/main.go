// Command notices writes THIRD_PARTY_NOTICES for release binaries: every
// Go module linked into them (as the binaries' own build information lists
// it, so exactly what ships, not what go.mod mentions) with its licence's
// name and the full text of its licence and notice files from the module
// cache, and the Go standard library's licence. The release ships it
// beside the binary, in the .deb (/usr/share/doc/anvil/) and in the image.
//
// It is generated at package time rather than committed: the list is a
// property of the binaries built, and a module's text comes from its
// checksum-verified download (go mod download), not from a copy kept in
// this repository.
//
//	go run ./deploy/notices -out dist/THIRD_PARTY_NOTICES dist/anvil-v1.0.0-linux-amd64 dist/anvil-v1.0.0-linux-arm64
package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

func main() {
	out := flag.String("out", "", "file to write (default: standard output)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: notices [-out FILE] BINARY...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var buf bytes.Buffer
	if err := write(&buf, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, _ = os.Stdout.Write(buf.Bytes())
		return
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
}

// module is one dependency as a binary records it; a replaced module's
// code (and so its licence) is the replacement's.
type module struct {
	Path, Version string
	// Dir is the module's directory in the module cache.
	Dir string
}

func (m module) String() string { return m.Path + "@" + m.Version }

func write(w io.Writer, binaries []string) error {
	seen := map[string]module{}
	goVersion := ""
	for _, b := range binaries {
		bi, err := buildinfo.ReadFile(b)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		if goVersion != "" && bi.GoVersion != goVersion {
			return fmt.Errorf("%s was built by %s, another binary by %s", b, bi.GoVersion, goVersion)
		}
		goVersion = bi.GoVersion
		for _, d := range bi.Deps {
			m := module{Path: d.Path, Version: d.Version}
			if d.Replace != nil {
				if d.Replace.Version == "" {
					return fmt.Errorf("%s is replaced by the directory %s: a release builds from published modules only", d.Path, d.Replace.Path)
				}
				m = module{Path: d.Replace.Path, Version: d.Replace.Version}
			}
			seen[m.String()] = m
		}
	}
	mods := make([]module, 0, len(seen))
	for _, m := range seen {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b module) int { return strings.Compare(a.String(), b.String()) })
	if err := locate(mods); err != nil {
		return err
	}

	fmt.Fprintf(w, "Third-party notices for Anvil\n\n")
	fmt.Fprintf(w, "Anvil is licensed under the Apache License, Version 2.0 (LICENSE). Its binary\n")
	fmt.Fprintf(w, "links the Go standard library (%s) and the %d Go modules below, each\n", goVersion, len(mods))
	fmt.Fprintf(w, "under its own licence, whose text follows its name. The OCI image's\n")
	fmt.Fprintf(w, "ipmitool and its libraries are Debian packages, with their copyright\n")
	fmt.Fprintf(w, "files in the image under /usr/share/doc/<package>/copyright.\n\n")
	fmt.Fprintf(w, "Summary:\n\n")
	type entry struct {
		name  string
		files []string
		kind  string
	}
	// The toolchain that built the binaries (the one go runs) has the
	// standard library's licence at its root.
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	goroot := strings.TrimSpace(string(out))
	entries := []entry{{name: "Go standard library " + goVersion, files: []string{filepath.Join(goroot, "LICENSE")}}}
	var missing []string
	for _, m := range mods {
		files, err := licenceFiles(m.Dir)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			missing = append(missing, m.String())
			continue
		}
		entries = append(entries, entry{name: m.String(), files: files})
	}
	if len(missing) > 0 {
		return fmt.Errorf("no licence file in %s", strings.Join(missing, ", "))
	}
	for i := range entries {
		var all []byte
		for _, f := range entries[i].files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			all = append(all, b...)
		}
		entries[i].kind = identify(all)
		fmt.Fprintf(w, "  %-70s %s\n", entries[i].name, entries[i].kind)
	}
	for _, e := range entries {
		fmt.Fprintf(w, "\n%s\n%s\nLicence: %s\n", strings.Repeat("=", 78), e.name, e.kind)
		for _, f := range e.files {
			b, _ := os.ReadFile(f)
			fmt.Fprintf(w, "\n--- %s\n\n%s", filepath.Base(f), b)
			if len(b) > 0 && b[len(b)-1] != '\n' {
				fmt.Fprintln(w)
			}
		}
	}
	return nil
}

// locate fills each module's directory with one go mod download, which
// also fetches (and verifies against go.sum's database) any module not in
// the cache yet.
func locate(mods []module) error {
	args := []string{"mod", "download", "-json"}
	for _, m := range mods {
		args = append(args, m.String())
	}
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var d struct{ Path, Version, Dir, Error string }
		if derr := dec.Decode(&d); errors.Is(derr, io.EOF) {
			break
		} else if derr != nil {
			return fmt.Errorf("go mod download: %v\n%s", derr, stderr.Bytes())
		}
		if d.Error != "" {
			return fmt.Errorf("go mod download %s@%s: %s", d.Path, d.Version, d.Error)
		}
		dirs[d.Path+"@"+d.Version] = d.Dir
	}
	if err != nil {
		return fmt.Errorf("go mod download: %v\n%s", err, stderr.Bytes())
	}
	for i := range mods {
		if mods[i].Dir = dirs[mods[i].String()]; mods[i].Dir == "" {
			return fmt.Errorf("go mod download did not name a directory for %s", mods[i])
		}
	}
	return nil
}

// licenceName matches the files that carry a module's licence terms or
// the notices its licence asks to be passed on (Apache-2.0's NOTICE).
var licenceName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents|unlicense)([-._].*)?$`)

func licenceFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && licenceName.MatchString(e.Name()) && !strings.HasSuffix(e.Name(), ".go") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// identify names a licence from its text by the phrases each licence's
// standard text has; a text it does not recognise is "see the text below".
func identify(text []byte) string {
	t := strings.Join(strings.Fields(string(text)), " ")
	has := func(s string) bool { return strings.Contains(t, s) }
	var names []string
	switch {
	case has("Apache License") && has("Version 2.0"):
		names = append(names, "Apache-2.0")
	}
	switch {
	case has("Mozilla Public License Version 2.0") || has("Mozilla Public License, version 2.0"):
		names = append(names, "MPL-2.0")
	}
	switch {
	case has("Permission is hereby granted, free of charge"):
		names = append(names, "MIT")
	case has("Redistribution and use in source and binary forms") && (has("Neither the name") || has("names of its contributors")):
		names = append(names, "BSD-3-Clause")
	case has("Redistribution and use in source and binary forms"):
		names = append(names, "BSD-2-Clause")
	case has("Permission to use, copy, modify, and/or distribute this software") || has("Permission to use, copy, modify, and distribute this software"):
		names = append(names, "ISC")
	case has("This is free and unencumbered software released into the public domain"):
		names = append(names, "Unlicense")
	}
	if len(names) == 0 {
		return "see the text below"
	}
	return strings.Join(names, " AND ")
}
