package override

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/policies"
)

type entry struct {
	name, body string
	symlink    bool
}

func makeZip(t testing.TB, entries ...entry) []byte {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.symlink {
			h.SetMode(os.ModeSymlink | 0o777)
		}
		f, err := w.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(e.body))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestValidUploadFlattensAndRenders(t *testing.T) {
	z := makeZip(t,
		entry{name: "docs/README.md", body: "not policy"},
		entry{name: "a/10-power.yaml", body: `"baremetal:node:set_power_state": "rule:system_member"` + "\n"},
		entry{name: "b/20-steps.yml.tmpl", body: `"baremetal:node:set_provision_state:clean_steps": "({{ .Default "baremetal:node:set_provision_state:clean_steps" }}) or rule:owner_member"` + "\n"},
		entry{name: "folder/", body: ""},
	)
	files, err := ReadZip(z)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(files.Names(), ",") != "10-power.yaml,20-steps.yml.tmpl" {
		t.Fatalf("files %v", files.Names())
	}
	rules, err := Rules(files)
	if err != nil {
		t.Fatal(err)
	}
	if rules["baremetal:node:set_provision_state:clean_steps"] != "(rule:system_member) or rule:owner_member" {
		t.Errorf("template rendered to %q", rules["baremetal:node:set_provision_state:clean_steps"])
	}
}

// One crafted upload per validation rule; each must be refused whole with
// a reason that says what is wrong.
func TestRefusedUploads(t *testing.T) {
	big := strings.Repeat("#", MaxFileBytes+1)
	ok := entry{name: "ok.yaml", body: `"baremetal:node:get": "rule:system_reader"`}
	for name, c := range map[string]struct {
		zip  []byte
		want string
	}{
		"not a zip":            {[]byte("PK\x03\x04garbage"), "not a valid zip"},
		"traversal":            {makeZip(t, ok, entry{name: "../../etc/x.yaml", body: "{}"}), "traversal"},
		"absolute":             {makeZip(t, entry{name: "/etc/x.yaml", body: "{}"}), "absolute"},
		"symlink":              {makeZip(t, entry{name: "link.yaml", body: "/etc/passwd", symlink: true}), "symbolic link"},
		"duplicate names":      {makeZip(t, entry{name: "a/p.yaml", body: "{}"}, entry{name: "b/p.yaml", body: "{}"}), "both flatten"},
		"bad yaml":             {makeZip(t, entry{name: "p.yaml", body: "a: [unclosed"}), "not valid YAML"},
		"not a mapping":        {makeZip(t, entry{name: "p.yaml", body: "- a\n- b"}), "mapping"},
		"bad check":            {makeZip(t, entry{name: "p.yaml", body: `"baremetal:node:get": "role:admin and ("`}), "baremetal:node:get"},
		"unknown rule":         {makeZip(t, entry{name: "p.yaml", body: `"baremetal:node:fly": "@"`}), "unknown rule"},
		"deny-listed":          {makeZip(t, entry{name: "p.yaml", body: `"anvil:policy:update": "@"`}), "protected"},
		"base rule":            {makeZip(t, entry{name: "base.yaml", body: `"system_member": "@"`}), `base.yaml: rule "system_member" is a base rule`},
		"base rule, templated": {makeZip(t, entry{name: "base.tpl", body: `"is_node_lessee": "@"`}), `base.tpl: rule "is_node_lessee" is a base rule`},
		"alias":                {makeZip(t, entry{name: "p.yaml", body: "x: &a \"@\"\n\"baremetal:node:get\": *a"}), "aliases"},
		"custom tag":           {makeZip(t, entry{name: "p.yaml", body: `"baremetal:node:get": !shell "rm -rf /"`}), "custom tag"},
		"bad template":         {makeZip(t, entry{name: "p.j2", body: `{{ .Nope }}`}), "template"},
		"template to bad yaml": {makeZip(t, entry{name: "p.tpl", body: `{{ "a: [" }}`}), "not valid YAML"},
		"oversize file":        {makeZip(t, entry{name: "p.yaml", body: big}), "bytes"},
		"undefined ref":        {makeZip(t, entry{name: "p.yaml", body: `"baremetal:node:get": "rule:nowhere"`}), "undefined rule"},
	} {
		files, err := ReadZip(c.zip)
		if err == nil {
			_, err = Rules(files)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one mentioning %q", name, err, c.want)
		}
	}
	if _, err := ReadZip(make([]byte, MaxZipBytes+1)); err == nil {
		t.Error("an oversize zip was read")
	}
}

func FuzzReadZip(f *testing.F) {
	f.Add(makeZip(f, entry{name: "a/p.yaml", body: `"baremetal:node:get": "@"`}))
	f.Add(makeZip(f, entry{name: "../p.yaml", body: "{}"}))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := ReadZip(data)
		if err != nil {
			return
		}
		total := 0
		for n, b := range files {
			if strings.ContainsAny(n, "/\\") || n == ".." || len(b) > MaxFileBytes {
				t.Fatalf("ReadZip let through %q (%d bytes)", n, len(b))
			}
			total += len(b)
		}
		if total > MaxTotalBytes || len(files) > MaxFiles {
			t.Fatalf("ReadZip let through %d files, %d bytes", len(files), total)
		}
		_, _ = Rules(files)
	})
}

// The dry run's diff marks a change that lets personas through with who
// gains, and leaves a narrowing unmarked.
func TestDiffMarksWidening(t *testing.T) {
	d := Diff(map[string]string{}, map[string]string{
		"baremetal:node:set_power_state": "rule:system_member",
		"baremetal:node:delete":          "rule:system_admin or role:admin",
	})
	if len(d) != 2 {
		t.Fatalf("diff %q", d)
	}
	if strings.Contains(d[1], WideningMark) {
		t.Errorf("a narrowing is marked: %s", d[1])
	}
	if !strings.Contains(d[0], "baremetal:node:delete") || !strings.Contains(d[0], WideningMark+"owner-admin, lessee-admin, other-admin") {
		t.Errorf("the widening is not marked with who gains: %s", d[0])
	}
}

// TestPresetsPassAsPolicyD: each shipped preset, dropped into a policy.d
// directory as its own file, is read and accepted whole by the same
// validation every override meets (no protected or base rule touched),
// and changes exactly the rules its file lists.
func TestPresetsPassAsPolicyD(t *testing.T) {
	for _, p := range policies.Presets() {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, p.File), p.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		files, err := ReadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v", p.File, err)
		}
		rules, err := Rules(files)
		if err != nil {
			t.Fatalf("%s refused in policy.d: %v", p.File, err)
		}
		// A preset writes one quoted rule per line, under comments.
		listed := 0
		for _, line := range strings.Split(string(p.Data), "\n") {
			if strings.HasPrefix(line, `"`) {
				listed++
			}
		}
		if len(rules) == 0 || len(rules) != listed {
			t.Errorf("%s: %d rules accepted, the file lists %d", p.File, len(rules), listed)
		}
	}
}
