package override

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// bounded runs fn and fails the test when it takes longer than a second
// or allocates more than 32 MiB: the limits must stop hostile templates
// early, not after the damage.
func bounded(t *testing.T, what string, fn func() error) error {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := fn()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if took > time.Second {
		t.Errorf("%s took %s", what, took)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("%s allocated %d MiB", what, alloc>>20)
	}
	return err
}

// The review's zip: ten nested ranges in under 200 bytes compressed,
// which rendered to 766 MB before there were limits.
func TestNestedRangeZipIsRefusedQuickly(t *testing.T) {
	body := `"baremetal:node:get": "` + strings.Repeat(`{{range $.Roles}}`, 10) + "role:x or " + strings.Repeat(`{{end}}`, 10) + `@"`
	z := makeZip(t, entry{name: "bomb.tpl", body: body})
	if len(z) > 400 {
		t.Fatalf("the zip is %d bytes; the point is that it is small", len(z))
	}
	err := bounded(t, "the nested-range zip", func() error {
		files, err := ReadZip(z)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Rules(files)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "bomb.tpl") || !strings.Contains(err.Error(), "100000") {
		t.Fatalf("err %v, want one naming bomb.tpl and the limit", err)
	}
}

// Each way a template could outgrow its budget is refused with the file
// and the limit named, quickly and in little memory.
func TestTemplateLimits(t *testing.T) {
	doubling := `{{$x := "0123456789abcdef"}}` + strings.Repeat(`{{$x = print $x $x}}`, 40) + `"k": "{{$x}}"`
	manyArgs := `{{$x := "0123456789abcdef"}}` + strings.Repeat(`{{$x = print $x $x}}`, 15) + `{{$y := print` + strings.Repeat(` $x`, 5000) + `}}`
	for name, c := range map[string]struct{ src, want string }{
		"output past 1 MiB":          {`{{range 40000}}role:reader or role:member or x {{end}}`, "more than 1048576 bytes"},
		"doubling a variable":        {doubling, "more than 1048576 bytes"},
		"one print of many args":     {manyArgs, "more than 1048576 bytes"},
		"range over a variable":      {`{{$r := .Roles}}{{range $r}}{{end}}`, "range only over .Roles or a number"},
		"a huge range number":        {`{{range 1000000000}}{{end}}`, "more than 100000 steps"},
		"printf widths":              {`{{printf "%01000000d" 1}}`, "function printf is not allowed"},
		"escapers that grow":         {`{{js "\\"}}`, "function js is not allowed"},
		"recursion":                  {`{{define "a"}}{{template "a"}}{{template "a"}}{{end}}{{template "a"}}`, "not allowed"},
		"an empty loop after a pipe": {`{{len (print (index .Roles 0))}}{{range 200000}}{{end}}`, "more than 100000 steps"},
		"ranges multiply in else":    {`{{range 0}}{{else}}` + strings.Repeat(`{{range 20}}`, 5) + strings.Repeat(`{{end}}`, 5) + `{{end}}`, "more than 100000 steps"},
	} {
		err := bounded(t, name, func() error { _, err := render("p.tpl", []byte(c.src)); return err })
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "p.tpl") {
			t.Errorf("%s: err %v, want one naming p.tpl and %q", name, err, c.want)
		}
	}
	// The wall-clock limit, with a deadline already past.
	_, err := renderWithin("slow.tpl", []byte(`{{range .Roles}}x{{end}}`), Limits{Output: MaxTemplateOutput, Work: MaxTemplateWork, Time: time.Nanosecond})
	if err == nil || !strings.Contains(err.Error(), "slow.tpl") || !strings.Contains(err.Error(), "longer than 1ns") {
		t.Errorf("deadline: %v", err)
	}
	// What templates are for still works: ranging over the roles and
	// extending a default.
	out, err := render("ok.tpl", []byte(`"baremetal:node:get": "{{range $i, $r := .Roles}}{{if $i}} or {{end}}role:{{$r}}{{end}} or {{ .Default "baremetal:node:get" }}"`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"baremetal:node:get": "role:admin or role:manager or role:member or role:reader or rule:system_or_project_reader"`; string(out) != want {
		t.Errorf("rendered %s", out)
	}
}

// A broken policy.d is judged once; polling it again while its files are
// unchanged reuses the verdict, and a change is judged afresh.
func TestBrokenDirVerdictIsCached(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		dir := t.TempDir()
		bad := filepath.Join(dir, "10-bad.tpl")
		if err := os.WriteFile(bad, []byte(`{{ .Nope }}`), 0o644); err != nil {
			t.Fatal(err)
		}
		enf, err := policies.New(policies.Defaults(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		m := &Manager{DB: db, Enf: enf, Dir: dir, Enabled: true, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		ctx := context.Background()
		validations := func() int { return strings.Count(logs.String(), "validating policy.d") }
		for range 5 {
			m.Sync(ctx)
		}
		if n := validations(); n != 1 {
			t.Errorf("an unchanged broken directory was validated %d times in 5 polls", n)
		}
		if st := m.Status(); !strings.HasPrefix(st, "PO (broken)") || !strings.Contains(st, "10-bad.tpl") {
			t.Errorf("status %q", st)
		}
		if err := os.WriteFile(bad, []byte(`"baremetal:node:get": "rule:system_reader"`), 0o644); err != nil {
			t.Fatal(err)
		}
		m.Sync(ctx)
		m.Sync(ctx)
		if n := validations(); n != 2 {
			t.Errorf("after a fix: %d validations, want 2", n)
		}
		if st := m.Status(); !strings.HasPrefix(st, "PO: 1 file") {
			t.Errorf("status after the fix %q", st)
		}
	})
}
