package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/reference"
	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/server/cli"
)

func checkout(t *testing.T) string {
	t.Helper()
	root := reference.Root()
	if root == "" {
		t.Fatal("no go.mod above the package directory")
	}
	return root
}

// TestReferenceCurrent fails when a flag, command, policy rule, microversion
// or metric changed without the pages under docs/reference.
func TestReferenceCurrent(t *testing.T) {
	root := checkout(t)
	pages, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(root, refDir, name))
		if err != nil {
			t.Errorf("%s/%s: %v; run go run ./internal/docgen and commit the result", refDir, name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s is stale (%s); run go run ./internal/docgen and commit the result", refDir, name, firstDifference(got, want))
		}
	}
	on, err := filepath.Glob(filepath.Join(root, refDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range on {
		if _, ok := pages[filepath.Base(f)]; !ok {
			t.Errorf("%s is not generated any more: run go run ./internal/docgen, which removes it", f)
		}
	}
}

// firstDifference names the first line where the committed page and the
// generated one part.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: committed %q, the code gives %q", i+1, gl, wl)
		}
	}
	return "same lines"
}

// TestReferenceFollowsTheCode checks that the generator reads what it
// claims to: a flag, rule, version constant and metric each appear.
func TestReferenceFollowsTheCode(t *testing.T) {
	pages, err := generate(checkout(t))
	if err != nil {
		t.Fatal(err)
	}
	for page, want := range map[string][]string{
		"serve.md":         {"| `--listen` | string | `127.0.0.1:6385` | `ANVIL_LISTEN` | `listen` |", "| `--config` |"},
		"cli.md":           {"## anvil user create", "## anvil db upgrade", "    anvil serve [flags]"},
		"policy.md":        {"| `baremetal:node:get` | `rule:system_or_project_reader` | system, project | `GET /v1/nodes/{node}` |"},
		"microversions.md": {"| 1.92 | `VerRunbooks` |", "to **1.115**"},
		"metrics.md":       {"| `anvil_http_requests_total` | counter | `method`, `route`, `status` |"},
		"migrations.md":    {"| 1 | baseline: the schema of the last unversioned release (5b855fe) |"},
	} {
		for _, w := range want {
			if !strings.Contains(string(pages[page]), w) {
				t.Errorf("%s lacks %q", page, w)
			}
		}
	}
}

// docFiles are the Markdown files the link checker reads, relative to
// the checkout.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// fence opens or closes a fenced code block.
var fence = regexp.MustCompile("^\\s*(```|~~~)")

// link is a Markdown link or image target: [text](target) or
// ![alt](target), an optional title after it.
var link = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// codeSpan is inline code, whose brackets are not links.
var codeSpan = regexp.MustCompile("`+[^`]*`+")

// proseLines yields each line outside fenced code blocks, with inline
// code removed, and its number.
func proseLines(text string, each func(n int, line string)) {
	in := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if !in {
			each(i+1, codeSpan.ReplaceAllString(line, ""))
		}
	}
}

// heading is an ATX heading line.
var heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
var htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

// anchors are the fragment names a page answers, as GitHub makes them from
// its headings: lower case, punctuation other than - and _ dropped,
// spaces to hyphens, and -1, -2… for repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	in := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if in {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugify(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(h string) string {
	// Links inside a heading count by their text.
	h = link.ReplaceAllStringFunc(h, func(s string) string {
		return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '×' && r != '→' && r != '—' && r != '…' && r != '⊃':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks checks every relative link and #anchor in README.md,
// CONTRIBUTING.md and docs/: the file must exist in the checkout and the
// anchor must be a heading (or explicit anchor) of that page. Each broken
// link is reported with its file and line.
func TestDocLinks(t *testing.T) {
	root := checkout(t)
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if s, ok := texts[rel]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		texts[rel] = string(b)
		return string(b), err
	}
	var missing []string
	for _, file := range docFiles(t, root) {
		text, err := read(file)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		proseLines(text, func(n int, line string) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Clean(filepath.Join(filepath.Dir(file), path))
					if strings.HasPrefix(dest, "..") {
						t.Errorf("%s:%d: %s leaves the repository", file, n, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						missing = append(missing, fmt.Sprintf("%s:%d: %s: no file %s", file, n, target, dest))
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				destText, err := read(dest)
				if err != nil {
					t.Errorf("%s:%d: %s: %v", file, n, target, err)
					continue
				}
				if !anchors(destText)[frag] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", file, n, target, dest, frag)
				}
			}
		})
	}
	// Pages other branches write are linked before they land; listing them
	// together says at once which are still missing.
	if len(missing) > 0 {
		t.Errorf("%d links name files that do not exist:\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

// TestDocsReachableFromIndex checks that every page under docs/ can be
// reached from docs/index.md by following relative links.
func TestDocsReachableFromIndex(t *testing.T) {
	root := checkout(t)
	seen := map[string]bool{}
	queue := []string{"docs/index.md"}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		if seen[file] {
			continue
		}
		seen[file] = true
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			continue // TestDocLinks reports it
		}
		proseLines(string(b), func(_ int, line string) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				path, _, _ := strings.Cut(m[1], "#")
				if strings.Contains(path, "://") || !strings.HasSuffix(path, ".md") {
					continue
				}
				queue = append(queue, filepath.Clean(filepath.Join(filepath.Dir(file), path)))
			}
		})
	}
	for _, f := range docFiles(t, root) {
		if strings.HasPrefix(f, "docs/") && !seen[f] {
			t.Errorf("%s cannot be reached from docs/index.md", f)
		}
	}
}

func TestLinkCheckerFindsBrokenLinks(t *testing.T) {
	page := "# Tour\n\n## Sign in, then see nodes\n\n## Sign in, then see nodes\n\n```sh\n# [not](a-link.md)\n```\n<a id=\"kept\"></a>\n"
	got := anchors(page)
	for _, want := range []string{"tour", "sign-in-then-see-nodes", "sign-in-then-see-nodes-1", "kept"} {
		if !got[want] {
			t.Errorf("anchors lack %q: %v", want, got)
		}
	}
	if got["not"] {
		t.Error("a heading inside a code block made an anchor")
	}
	var found []string
	proseLines("see [a](b.md#c) and `[x](y.md)`\n```\n[z](w.md)\n```\n![img](s.png \"t\")", func(_ int, line string) {
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			found = append(found, m[1])
		}
	})
	if !slices.Equal(found, []string{"b.md#c", "s.png"}) {
		t.Errorf("links found: %q", found)
	}
	if s := slugify("`anvil serve`: flags, env & keys (1.92)"); s != "anvil-serve-flags-env--keys-192" {
		t.Errorf("slug %q", s)
	}
}

// TestTwoCommands keeps the README's two commands identical to what the
// Taskfile's run task and CI execute.
func TestTwoCommands(t *testing.T) {
	root := checkout(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	taskfile, err := os.ReadFile(filepath.Join(root, "Taskfile.yml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	suite := strings.TrimSpace(lines[len(lines)-1])
	run := regexp.MustCompile(`(?m)^\s*- (go run \. serve [^{\n]*?)\s*\{\{\.CLI_ARGS\}\}`).FindSubmatch(taskfile)
	if run == nil {
		t.Fatal("Taskfile.yml's run task has no go run . serve command")
	}
	for _, cmd := range []string{string(run[1]), suite} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cmd) + `(\s+#.*)?$`).Match(readme) {
			t.Errorf("README.md has no line %q (what Taskfile.yml and .ci/run run)", cmd)
		}
	}
}

// runnable is a shell block marked to run: ```sh runnable.
type runnable struct {
	file string
	line int
	code string
}

func runnableBlocks(t *testing.T, root string) []runnable {
	t.Helper()
	var out []runnable
	for _, file := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			continue
		}
		var cur *runnable
		for i, line := range strings.Split(string(b), "\n") {
			trim := strings.TrimSpace(line)
			switch {
			case cur != nil && strings.HasPrefix(trim, "```"):
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.code += line + "\n"
			case strings.HasPrefix(trim, "```") && slices.Equal(strings.Fields(strings.TrimPrefix(trim, "```")), []string{"sh", "runnable"}):
				cur = &runnable{file: file, line: i + 1}
			}
		}
	}
	return out
}

// TestRunnableDocs runs every ```sh runnable block of README.md and docs/
// against a fresh server started as the README's first command starts it
// (anvil serve --demo 200, in-process, on a new SQLite file), with the environment
// the README tells a reader to set: OS_ENDPOINT, OS_USERNAME and
// OS_PASSWORD (the password the reader chose when the portal's first
// sign-in with the generated one asked for a new one, as this test does
// through the portal's forms). A file's blocks run in order in one shell,
// as a reader types them into one terminal.
func TestRunnableDocs(t *testing.T) {
	root := checkout(t)
	blocks := runnableBlocks(t, root)
	if len(blocks) == 0 {
		t.Fatal("no ```sh runnable blocks in README.md or docs/")
	}
	for _, tool := range []string{"bash", "curl", "baremetal"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (Debian: bash, curl, python3-ironicclient)", tool)
			}
			t.Skipf("%s is missing (Debian: bash, curl, python3-ironicclient); CI=true makes this a failure", tool)
		}
	}
	dir := t.TempDir()
	var errOut syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cmd := cli.NewRoot(&errOut, &errOut)
	// The README's command on a scratch database and a free port; the
	// bootstrap admin's hash at bcrypt's lowest cost, as test servers
	// have it, since every request of the CLI checks the password again.
	cmd.SetArgs([]string{"serve", "--demo", "200", "--listen", "127.0.0.1:0", "--database", filepath.Join(dir, "anvil.db"),
		"--policy-dir", filepath.Join(dir, "policy.d"), "--password-hash-cost", "4"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	// The password is in the file the start names, as the README says.
	password := regexp.MustCompile(`one-time password is in (\S+) \(`)
	listening := regexp.MustCompile(`listen=(http://127\.0\.0\.1:\d+)`)
	var pw, url string
	for deadline := time.Now().Add(60 * time.Second); pw == "" || url == ""; time.Sleep(50 * time.Millisecond) {
		out := errOut.String()
		if m := password.FindStringSubmatch(out); m != nil && pw == "" {
			b, err := os.ReadFile(m[1])
			if err != nil {
				t.Fatalf("the bootstrap password's file: %v", err)
			}
			pw = strings.TrimSpace(string(b))
		}
		if m := listening.FindStringSubmatch(out); m != nil {
			url = m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no password and address within 60 s:\n%s", out)
		}
	}
	// As the README's first step: sign in with the generated password
	// and choose a new one, which the API then takes.
	pw = choosePassword(t, url, "admin", pw, "tour-password-1")
	byFile := map[string][]runnable{}
	var files []string
	for _, b := range blocks {
		if byFile[b.file] == nil {
			files = append(files, b.file)
		}
		byFile[b.file] = append(byFile[b.file], b)
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			var script strings.Builder
			script.WriteString("set -euo pipefail\n")
			for _, b := range byFile[file] {
				fmt.Fprintf(&script, "echo \">>> %s:%d at $(date +%%T)\" >&2\n%s", b.file, b.line, b.code)
			}
			sh := exec.Command("bash", "-c", script.String())
			sh.Dir = dir
			sh.Env = append(os.Environ(), "OS_ENDPOINT="+url, "OS_USERNAME=admin", "OS_PASSWORD="+pw)
			var out bytes.Buffer
			sh.Stdout, sh.Stderr = &out, &out
			done := make(chan error, 1)
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- sh.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("the runnable blocks of %s failed (%v) after the block marked last below:\n%s", file, err, out.String())
				} else {
					t.Logf("%s:\n%s", file, out.String())
				}
			case <-time.After(3 * time.Minute):
				sh.Process.Kill()
				<-done
				t.Errorf("the runnable blocks of %s ran past 3 minutes:\n%s", file, out.String())
			}
		})
	}
}

// TestReadmeStaysShort keeps the README a newcomer's page: what Anvil is,
// the two commands, the tour and links; the rest belongs in docs/.
func TestReadmeStaysShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(checkout(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 150 {
		t.Errorf("README.md has %d lines; keep it to 150 and move the rest into docs/", n)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// choosePassword signs in to the portal at base as user with password
// old, which sends it to the change-password page, and changes it there
// to chosen, which it returns.
func choosePassword(t *testing.T, base, user, old, chosen string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	csrf := ""
	form := func(method, path string, f url.Values) string {
		t.Helper()
		var body io.Reader
		if f != nil {
			f.Set("csrf", csrf)
			body = strings.NewReader(f.Encode())
		}
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/html")
		if f != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d\n%s", method, path, resp.StatusCode, raw)
		}
		if m := csrfField.FindSubmatch(raw); m != nil {
			csrf = string(m[1])
		}
		return resp.Request.URL.Path
	}
	form("GET", "/login", nil)
	if at := form("POST", "/login", url.Values{"username": {user}, "password": {old}}); at != "/account/password" {
		t.Fatalf("the first sign-in led to %s, not the change-password page", at)
	}
	form("POST", "/account/password", url.Values{"current": {old}, "new": {chosen}, "confirm": {chosen}})
	return chosen
}
