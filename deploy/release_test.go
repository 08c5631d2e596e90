package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReleaseTask cuts a release as a maintainer would, in a clone of
// this repository (its committed state) with a CHANGELOG section for a
// test version committed there: go tool task release refuses what it
// must, then builds for amd64 and arm64, and the test checks that every
// artefact says the tag's version, that SHA256SUMS verifies all of them,
// that RELEASE-NOTES.md is the CHANGELOG section, and that the annotated
// tag names the commit built. Slow (two builds of the binary and the
// image's Debian packages for two architectures), so it runs with the
// package tests.
func TestReleaseTask(t *testing.T) {
	need(t, "git", "git")
	need(t, "dpkg-deb", "dpkg")
	need(t, "apt-get", "apt")
	need(t, "sha256sum", "coreutils")
	const version, debVersion = "v9.8.7", "9.8.7"

	src, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	repo, dist := filepath.Join(tmp, "repo"), filepath.Join(tmp, "dist")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "clone", "--quiet", "--no-hardlinks", src, repo).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	git("config", "user.name", "Release Test")
	git("config", "user.email", "release-test@invalid")
	// Tags the source repository has are not this test's concern.
	for _, tag := range strings.Fields(git("tag", "--list")) {
		git("tag", "--delete", tag)
	}
	release := func(args ...string) ([]byte, error) {
		cmd := exec.Command("go", append([]string{"tool", "task", "release", "DIST=" + dist}, args...)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOFLAGS=-trimpath")
		return cmd.CombinedOutput()
	}
	refuses := func(why, want string, args ...string) {
		t.Helper()
		out, err := release(args...)
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("release %v (%s): %v, want a refusal saying %q:\n%s", args, why, err, want, out)
		}
	}

	refuses("no leading v", "is not a semantic version", "VERSION="+debVersion)
	refuses("not semver", "is not a semantic version", "VERSION=v9.8")
	refuses("no CHANGELOG section", "CHANGELOG.md has no section", "VERSION="+version)

	changelog := filepath.Join(repo, "CHANGELOG.md")
	b, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	section := "## [" + debVersion + "] - 2026-11-29\n\n### Added\n\n- What TestReleaseTask releases.\n  Two lines, to see them kept.\n"
	// The section goes where a release's does: below Unreleased and what
	// it lists, above the newest release.
	u := bytes.Index(b, []byte("## [Unreleased]\n"))
	if u < 0 {
		t.Fatal("CHANGELOG.md has no '## [Unreleased]' heading to add a section under")
	}
	next := bytes.Index(b[u+1:], []byte("\n## ["))
	if next < 0 {
		t.Fatal("CHANGELOG.md has no release below Unreleased")
	}
	at := u + 1 + next + 1
	b = append(b[:at:at], append([]byte(section+"\n"), b[at:]...)...)
	if err := os.WriteFile(changelog, b, 0o644); err != nil {
		t.Fatal(err)
	}
	refuses("the chart names another release", "appVersion is not", "VERSION="+version)
	chart := filepath.Join(repo, "deploy/helm/anvil/Chart.yaml")
	c, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	c = regexp.MustCompile(`(?m)^appVersion: .*$`).ReplaceAll(c, []byte(`appVersion: "`+version+`"`))
	if err := os.WriteFile(chart, c, 0o644); err != nil {
		t.Fatal(err)
	}
	refuses("uncommitted CHANGELOG", "uncommitted changes", "VERSION="+version)
	git("commit", "--quiet", "-am", "CHANGELOG and chart: "+version)
	head := git("rev-parse", "HEAD")
	// A folder with another run's files is refused, not emptied.
	if err := os.MkdirAll(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	refuses("DIST holds files", "holds files", "VERSION="+version)
	if _, err := os.Stat(filepath.Join(dist, "old")); err != nil {
		t.Errorf("the refused release touched DIST: %v", err)
	}
	if err := os.Remove(filepath.Join(dist, "old")); err != nil {
		t.Fatal(err)
	}

	if out, err := release("VERSION=" + version); err != nil {
		t.Fatalf("go tool task release VERSION=%s: %v\n%s", version, err, out)
	}

	// The binary says the version and the commit the tag names.
	out, err := exec.Command(filepath.Join(dist, "anvil-"+version+"-linux-amd64"), "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version, Commit string }
	if err := json.Unmarshal(out, &v); err != nil || v.Version != version || v.Commit != head {
		t.Errorf("anvil version --json: %s (%v), want version %s commit %s", out, err, version, head)
	}
	plain, _ := exec.Command(filepath.Join(dist, "anvil-"+version+"-linux-amd64"), "version").Output()
	if !strings.HasPrefix(string(plain), "anvil "+version+" commit "+head+" ") {
		t.Errorf("anvil version: %s", plain)
	}

	// The packages' control Version is the tag's, without the v.
	for _, arch := range []string{"amd64", "arm64"} {
		deb := filepath.Join(dist, "anvil_"+debVersion+"_"+arch+".deb")
		out, err := exec.Command("dpkg-deb", "-f", deb, "Version", "Architecture").Output()
		if err != nil {
			t.Errorf("dpkg-deb -f %s: %v", deb, err)
			continue
		}
		if want := "Version: " + debVersion + "\nArchitecture: " + arch + "\n"; string(out) != want {
			t.Errorf("%s: control\n%s\nwant\n%s", deb, out, want)
		}
	}

	// The images carry it in their labels and the tag they load as.
	for _, arch := range []string{"amd64", "arm64"} {
		img := readImage(t, filepath.Join(dist, "anvil-"+version+"-linux-"+arch+".oci.tar"))
		if l := img.config.Config.Labels; l["org.opencontainers.image.version"] != version || l["org.opencontainers.image.revision"] != head {
			t.Errorf("%s image labels %v", arch, l)
		}
		if img.refName != version || img.config.Architecture != arch {
			t.Errorf("%s image: ref name %q, architecture %q", arch, img.refName, img.config.Architecture)
		}
	}

	// SHA256SUMS lists every other file in the release once, and each
	// verifies.
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Errorf("SHA256SUMS line %q", sc.Text())
			continue
		}
		listed = append(listed, name)
	}
	ents, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range ents {
		if e.Name() != "SHA256SUMS" {
			files = append(files, e.Name())
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, files) {
		t.Errorf("SHA256SUMS lists %v, the release has %v", listed, files)
	}
	for _, want := range []string{"anvil-" + version + "-linux-amd64", "anvil-" + version + "-linux-arm64", "anvil_" + debVersion + "_amd64.deb", "anvil_" + debVersion + "_arm64.deb",
		"anvil-" + version + "-linux-amd64.oci.tar", "anvil-" + version + "-linux-arm64.oci.tar", "THIRD_PARTY_NOTICES", "RELEASE-NOTES.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("the release lacks %s: %v", want, files)
		}
	}
	check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check: %v\n%s", err, out)
	}

	// The notes are the CHANGELOG section, as written.
	notes, err := os.ReadFile(filepath.Join(dist, "RELEASE-NOTES.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(notes) != section {
		t.Errorf("RELEASE-NOTES.md\n%s\nwant the CHANGELOG section\n%s", notes, section)
	}

	// An annotated tag on the commit built, whose message holds the notes.
	if typ := git("cat-file", "-t", version); typ != "tag" {
		t.Errorf("%s is a %s, want an annotated tag", version, typ)
	}
	if c := git("rev-parse", version+"^{commit}"); c != head {
		t.Errorf("%s names %s, want %s", version, c, head)
	}
	if msg := git("tag", "--list", "--format=%(contents)", version); !strings.Contains(msg, strings.TrimSpace(section)) {
		t.Errorf("tag message %q lacks the notes", msg)
	}
	if d := git("describe", "--tags", "--exact-match"); d != version {
		t.Errorf("git describe: %s", d)
	}
	refuses("the tag exists", "exists already", "VERSION="+version)
}
