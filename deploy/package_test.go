// Package deploy_test builds the release artefacts the way an operator
// gets them (go tool task package) and checks each as its consumer would:
// the .deb as dpkg and systemd see it, the unit's command line by running
// it, the OCI image by its layout (and skopeo where installed).
package deploy_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dist runs the package task once for every test in the package, for
// both architectures a release has: amd64 runs here, arm64 is checked by
// its files (TestArm64).
// ANVIL_TEST_DIST names a folder that command already filled instead
// (when iterating on a test; it is left in place).
var dist = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("ANVIL_TEST_DIST"); dir != "" {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "anvil-dist-")
	if err != nil {
		return "", err
	}
	built = dir
	cmd := exec.Command("go", "tool", "task", "package", "DIST="+dir, "ARCHES=amd64 arm64")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: out}
	}
	return dir, nil
})

func mustDist(t *testing.T) string {
	t.Helper()
	dir, err := dist()
	if err != nil {
		if e, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go tool task package: %v\n%s", err, e.Stderr)
		}
		t.Fatal(err)
	}
	return dir
}

// built is the folder dist made, if a test asked for it: TestMain removes
// it, and does not build one just to remove it when only tests that need
// none ran (TestReleaseTask, the Helm tests).
var built string

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(built)
	}
	os.Exit(code)
}

func need(t *testing.T, cmd, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(cmd); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing (Debian package %s; .ci/run installs it)", cmd, pkg)
		}
		t.Skipf("%s is missing (Debian package %s)", cmd, pkg)
	}
}

// needRoot fails the test in CI, and skips it elsewhere, unless it runs
// as root; why says what needs root.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal(why + ": the test needs root")
		}
		t.Skip(why + ": the test needs root")
	}
}

func gitHead(t *testing.T) string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func only(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(pattern)
	if len(m) != 1 {
		t.Fatalf("%s: want one file, have %v", pattern, m)
	}
	return m[0]
}

// binary is the package task's static binary for arch.
func binary(t *testing.T, arch string) string {
	t.Helper()
	return only(t, filepath.Join(mustDist(t), "anvil-*-linux-"+arch))
}

// checkStatic fails unless path is a static ELF executable for machine.
func checkStatic(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is for %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not a static binary", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s links %v", path, libs)
	}
}

func TestBinary(t *testing.T) {
	d := mustDist(t)
	bin := binary(t, "amd64")
	checkStatic(t, bin, elf.EM_X86_64)
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version, Commit, Date string }
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if !strings.HasPrefix(v.Version, "v") || v.Commit != gitHead(t) {
		t.Errorf("anvil version %+v, want a v… version and commit %s", v, gitHead(t))
	}
	if _, err := time.Parse(time.RFC3339, v.Date); err != nil {
		t.Errorf("build date %q: %v", v.Date, err)
	}
	// The artefacts are named after the same version.
	for _, name := range []string{"anvil-" + v.Version + "-linux-amd64", "anvil-" + v.Version + "-linux-amd64.oci.tar", "anvil-" + v.Version + "-linux-arm64", "anvil-" + v.Version + "-linux-arm64.oci.tar", "THIRD_PARTY_NOTICES"} {
		only(t, filepath.Join(d, name))
	}
	// dpkg's form of the version: no v, and ~ before a pre-release.
	only(t, filepath.Join(d, "anvil_"+strings.Replace(strings.TrimPrefix(v.Version, "v"), "-", "~", 1)+"_amd64.deb"))
	only(t, filepath.Join(d, "anvil_"+strings.Replace(strings.TrimPrefix(v.Version, "v"), "-", "~", 1)+"_arm64.deb"))
}

// TestNotices: THIRD_PARTY_NOTICES names every module the binary links,
// as the binary's build information lists them, each with licence text.
func TestNotices(t *testing.T) {
	d := mustDist(t)
	text, err := os.ReadFile(filepath.Join(d, "THIRD_PARTY_NOTICES"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "version", "-m", binary(t, "amd64")).Output()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		// "dep PATH VERSION SUM", or "dep PATH VERSION" followed by
		// "=> PATH VERSION SUM" for a replaced module, whose code and so
		// whose notice is the replacement's.
		f := strings.Fields(line)
		if len(f) != 4 || (f[0] != "dep" && f[0] != "=>") {
			continue
		}
		n++
		if !bytes.Contains(text, []byte("\n"+f[1]+"@"+f[2]+"\nLicence: ")) {
			t.Errorf("THIRD_PARTY_NOTICES lacks %s@%s", f[1], f[2])
		}
	}
	if n < 20 {
		t.Errorf("go version -m lists %d modules: %s", n, out)
	}
	for _, want := range []string{"Go standard library go1.", "Apache License", "Permission is hereby granted", "Redistribution and use in source and binary forms"} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("THIRD_PARTY_NOTICES lacks %q", want)
		}
	}
	if bytes.Contains(text, []byte("Licence: see the text below")) {
		t.Log("some licences are not recognised by name (their text is there)")
	}
}

// extractDeb unpacks the .deb's files and control area.
func extractDeb(t *testing.T) (deb, root, control string) {
	t.Helper()
	need(t, "dpkg-deb", "dpkg")
	deb = only(t, filepath.Join(mustDist(t), "anvil_*_amd64.deb"))
	root, control = t.TempDir(), t.TempDir()
	for _, args := range [][]string{{"-x", deb, root}, {"-e", deb, control}} {
		if out, err := exec.Command("dpkg-deb", args...).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb %v: %v\n%s", args, err, out)
		}
	}
	return deb, root, control
}

func TestDeb(t *testing.T) {
	deb, root, control := extractDeb(t)
	out, err := exec.Command("dpkg-deb", "-f", deb, "Package", "Depends", "Architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Package: anvil", "Depends: ipmitool", "Architecture: amd64"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("control fields lack %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"usr/bin/anvil", "lib/systemd/system/anvil.service", "etc/anvil/anvil.yaml", "usr/lib/sysusers.d/anvil.conf", "etc/anvil/policy.d", "usr/share/doc/anvil/copyright", "usr/share/doc/anvil/THIRD_PARTY_NOTICES"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the .deb lacks /%s", f)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "usr/bin/anvil")); err == nil && st.Mode().Perm() != 0o755 {
		t.Errorf("/usr/bin/anvil mode %v", st.Mode())
	}
	conffiles, _ := os.ReadFile(filepath.Join(control, "conffiles"))
	if !slices.Contains(strings.Fields(string(conffiles)), "/etc/anvil/anvil.yaml") {
		t.Errorf("conffiles %q lack /etc/anvil/anvil.yaml", conffiles)
	}
	postinst, _ := os.ReadFile(filepath.Join(control, "postinst"))
	if !strings.Contains(string(postinst), "systemd-sysusers anvil.conf") {
		t.Errorf("postinst does not create the anvil user:\n%s", postinst)
	}
	if lic, _ := os.ReadFile(filepath.Join(root, "usr/share/doc/anvil/copyright")); !bytes.Contains(lic, []byte("Apache License")) {
		t.Error("/usr/share/doc/anvil/copyright is not the Apache License")
	}
	// The package's binary is the release binary.
	if a, b := sum(t, filepath.Join(root, "usr/bin/anvil")), sum(t, binary(t, "amd64")); a != b {
		t.Error("/usr/bin/anvil in the .deb is not the amd64 binary")
	}
	if a, b := sum(t, filepath.Join(root, "usr/share/doc/anvil/THIRD_PARTY_NOTICES")), sum(t, filepath.Join(mustDist(t), "THIRD_PARTY_NOTICES")); a != b {
		t.Error("the .deb's THIRD_PARTY_NOTICES is not the release's")
	}
	// The arm64 package holds the arm64 binary.
	arm := only(t, filepath.Join(mustDist(t), "anvil_*_arm64.deb"))
	if out, err := exec.Command("dpkg-deb", "-f", arm, "Architecture").Output(); err != nil || strings.TrimSpace(string(out)) != "arm64" {
		t.Errorf("%s: Architecture %q (%v)", arm, out, err)
	}
	armRoot := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", arm, armRoot).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	if a, b := sum(t, filepath.Join(armRoot, "usr/bin/anvil")), sum(t, binary(t, "arm64")); a != b {
		t.Error("/usr/bin/anvil in the arm64 .deb is not the arm64 binary")
	}
}

func sum(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// unit reads the packaged unit's settings (every value of each key).
func unit(t *testing.T, root string) map[string][]string {
	b, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/anvil.service"))
	if err != nil {
		t.Fatal(err)
	}
	u := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(line, "#") {
			u[k] = append(u[k], v)
		}
	}
	return u
}

func TestUnitVerifies(t *testing.T) {
	need(t, "systemd-analyze", "systemd")
	_, root, _ := extractDeb(t)
	u := unit(t, root)
	for k, want := range map[string]string{
		"User": "anvil", "StateDirectory": "anvil", "ProtectSystem": "strict", "ProtectHome": "yes",
		"NoNewPrivileges": "yes", "PrivateTmp": "yes", "CapabilityBoundingSet": "", "SystemCallFilter": "@system-service",
	} {
		if !slices.Contains(u[k], want) {
			t.Errorf("anvil.service %s=%q, want %q", k, u[k], want)
		}
	}
	// systemd checks that ExecStart's binary exists: point it at the
	// unpacked one (--root would also hide this machine's targets).
	b, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/anvil.service"))
	if err != nil {
		t.Fatal(err)
	}
	unitCopy := filepath.Join(t.TempDir(), "anvil.service")
	b = bytes.ReplaceAll(b, []byte("ExecStart=/usr/bin/anvil"), []byte("ExecStart="+filepath.Join(root, "usr/bin/anvil")))
	if err := os.WriteFile(unitCopy, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", unitCopy).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// systemd's own exposure score (0 to 10, measured 1.4): the hardening
	// may not slip past 2.0 ("OK") unnoticed.
	if out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=20", unitCopy).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0: %v\n%s", err, out)
	}
}

// TestUnitCommandServes starts the unit's own ExecStart command line from
// the unpacked package, with its packaged config, against a temporary
// state directory (the variables stand in for what StateDirectory= and
// the real address would be), and asks it whether it is healthy.
func TestUnitCommandServes(t *testing.T) {
	_, root, _ := extractDeb(t)
	argv := strings.Fields(unit(t, root)["ExecStart"][0])
	for i, a := range argv {
		if strings.HasPrefix(a, "/usr/") || strings.HasPrefix(a, "/etc/") {
			argv[i] = filepath.Join(root, a)
		}
	}
	state := t.TempDir()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = state
	cmd.Env = append(os.Environ(), "ANVIL_DATABASE="+filepath.Join(state, "anvil.db"), "ANVIL_LISTEN=127.0.0.1:0", "ANVIL_POLICY_DIR="+filepath.Join(state, "policy.d"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The packaged config logs JSON; the listening line names the port.
	var url string
	var lines []string
	sc := bufio.NewScanner(stderr)
	for url == "" && sc.Scan() {
		lines = append(lines, sc.Text())
		var rec struct{ Msg, Listen string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "anvil serving" {
			url = rec.Listen
		}
	}
	if url == "" {
		t.Fatalf("anvil serve ended without serving:\n%s", strings.Join(lines, "\n"))
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "anvil.db")); err != nil {
		t.Errorf("no database in the state directory: %v", err)
	}
}

// ociImage is what the test reads back from the archive.
type ociImage struct {
	config struct {
		Architecture string
		OS           string
		Config       struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Env        []string
			WorkingDir string
			Volumes    map[string]struct{}
			Labels     map[string]string
		}
	}
	// refName is the index's org.opencontainers.image.ref.name for the
	// manifest, annotations the manifest's own.
	refName     string
	annotations map[string]string
	files       map[string]*tar.Header
	bin         []byte
	// rootfs is the layers unpacked in order, as a runtime would.
	rootfs string
}

func readImage(t *testing.T, archive string) ociImage {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		entries[h.Name] = b
	}
	blob := func(digest string) []byte {
		b, ok := entries["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", digest)
		}
		if s := sha256.Sum256(b); "sha256:"+hex.EncodeToString(s[:]) != digest {
			t.Fatalf("blob %s has another digest", digest)
		}
		return b
	}
	type desc struct {
		MediaType, Digest string
		Size              int
		Annotations       map[string]string
	}
	var index struct{ Manifests []desc }
	if err := json.Unmarshal(entries["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", entries["index.json"], err)
	}
	var manifest struct {
		Config      desc
		Layers      []desc
		Annotations map[string]string
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var img ociImage
	img.refName = index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	img.annotations = manifest.Annotations
	if err := json.Unmarshal(blob(manifest.Config.Digest), &img.config); err != nil {
		t.Fatal(err)
	}
	img.files = map[string]*tar.Header{}
	img.rootfs = t.TempDir()
	for _, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blob(l.Digest)))
		if err != nil {
			t.Fatal(err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			img.files[h.Name] = h
			body, _ := io.ReadAll(lr)
			if h.Name == "usr/bin/anvil" {
				img.bin = body
			}
			unpack(t, img.rootfs, h, body)
		}
	}
	return img
}

func unpack(t *testing.T, root string, h *tar.Header, body []byte) {
	t.Helper()
	p := filepath.Join(root, h.Name)
	var err error
	switch h.Typeflag {
	case tar.TypeDir:
		err = os.MkdirAll(p, 0o755)
	case tar.TypeReg:
		err = os.WriteFile(p, body, 0o600)
	case tar.TypeSymlink:
		err = os.Symlink(h.Linkname, p)
	case tar.TypeLink:
		err = os.Link(filepath.Join(root, h.Linkname), p)
	default:
		t.Fatalf("layer entry %s of type %c", h.Name, h.Typeflag)
	}
	if err == nil && h.Typeflag != tar.TypeSymlink {
		err = os.Chmod(p, fs.FileMode(h.Mode&0o777)|modeBits(h.Mode))
	}
	if err == nil && os.Geteuid() == 0 {
		err = os.Lchown(p, h.Uid, h.Gid)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func modeBits(m int64) fs.FileMode {
	if m&0o1000 != 0 {
		return fs.ModeSticky
	}
	return 0
}

func TestImage(t *testing.T) {
	d := mustDist(t)
	archive := only(t, filepath.Join(d, "anvil-*-linux-amd64.oci.tar"))
	img := readImage(t, archive)
	c := img.config.Config
	if c.User == "" || strings.HasPrefix(c.User, "0") || c.User == "root" {
		t.Errorf("image user %q, want non-root", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/bin/anvil"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q, command %q; want anvil, and serve as the default command", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.Volumes["/var/lib/anvil"]; !ok || !slices.Contains(c.Env, "ANVIL_DATABASE=/var/lib/anvil/anvil.db") {
		t.Errorf("the SQLite database is not in a volume: volumes %v, env %q", c.Volumes, c.Env)
	}
	if img.config.OS != "linux" || img.config.Architecture != "amd64" {
		t.Errorf("platform %s/%s", img.config.OS, img.config.Architecture)
	}
	want, _ := os.ReadFile(binary(t, "amd64"))
	if !bytes.Equal(img.bin, want) {
		t.Error("the image's /usr/bin/anvil is not the amd64 binary")
	}
	// The image names the binary's version in its labels, its manifest
	// and the tag podman and skopeo find it by.
	out, err := exec.Command(binary(t, "amd64"), "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version string }
	_ = json.Unmarshal(out, &v)
	if l := img.config.Config.Labels["org.opencontainers.image.version"]; l != v.Version || img.refName != v.Version || img.annotations["org.opencontainers.image.version"] != v.Version {
		t.Errorf("image version: label %q, ref name %q, manifest %q; want %q", l, img.refName, img.annotations["org.opencontainers.image.version"], v.Version)
	}
	// ipmitool from Debian's packages, with everything it links, and
	// each package's copyright; the Go modules' notices beside anvil.
	checkLinked(t, img.rootfs, elf.EM_X86_64, "x86_64-linux-gnu", "/usr/bin/ipmitool")
	for _, f := range []string{"usr/share/doc/ipmitool/copyright", "usr/share/doc/libfreeipmi17/copyright", "usr/share/doc/anvil/THIRD_PARTY_NOTICES"} {
		if img.files[f] == nil {
			t.Errorf("the image lacks /%s", f)
		}
	}
	for name, wantMode := range map[string]int64{"etc/passwd": 0o644, "etc/ssl/certs/ca-certificates.crt": 0o644, "var/lib/anvil/": 0o700, "tmp/": 0o1777} {
		if h := img.files[name]; h == nil || h.Mode != wantMode {
			t.Errorf("image file %s: %+v, want mode %o", name, h, wantMode)
		}
	}
	if h := img.files["var/lib/anvil/"]; h != nil && h.Uid != 65532 {
		t.Errorf("state dir owned by %d, not the image user", h.Uid)
	}

	t.Run("runs", func(t *testing.T) { runImage(t, img) })

	// The archive as a container tool reads it.
	need(t, "skopeo", "skopeo")
	out, err = exec.Command("skopeo", "inspect", "--config", "oci-archive:"+archive).Output()
	if err != nil {
		t.Fatalf("skopeo inspect: %v", err)
	}
	var sk struct{ Config struct{ User string } }
	if err := json.Unmarshal(out, &sk); err != nil || sk.Config.User != c.User {
		t.Errorf("skopeo inspect --config: %s (%v)", out, err)
	}
}

// runImage runs the image as a container runtime would, without one:
// chrooted into its unpacked layers, as its user, with its environment,
// working directory and entrypoint. Only the listen address differs, so
// the test can find the port.
func runImage(t *testing.T, img ociImage) {
	needRoot(t, "running the image chroots into it")
	c := img.config.Config
	uidS, gidS, _ := strings.Cut(c.User, ":")
	uid, err1 := strconv.Atoi(uidS)
	gid, err2 := strconv.Atoi(gidS)
	if err1 != nil || err2 != nil {
		t.Fatalf("image user %q: want numeric uid:gid", c.User)
	}
	argv := append(slices.Clone(c.Entrypoint), c.Cmd...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.WorkingDir
	cmd.Env = append(slices.Clone(c.Env), "ANVIL_LISTEN=127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: img.rootfs, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	listen := regexp.MustCompile(`msg="anvil serving" listen=(http://\S+)`)
	var url string
	var lines []string
	sc := bufio.NewScanner(stderr)
	for url == "" && sc.Scan() {
		lines = append(lines, sc.Text())
		if m := listen.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatalf("the image's anvil serve ended without serving:\n%s", strings.Join(lines, "\n"))
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /readyz: %d", resp.StatusCode)
	}
	// ipmitool runs in the image, as its user, with the image's libraries
	// alone (the chroot has nothing else).
	ipmi := exec.Command("/usr/bin/ipmitool", "-V")
	ipmi.Env = slices.Clone(c.Env)
	ipmi.SysProcAttr = &syscall.SysProcAttr{Chroot: img.rootfs, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if out, err := ipmi.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "ipmitool version ") {
		t.Errorf("ipmitool -V in the image: %v\n%s", err, out)
	}
	// The database went to the volume, written as the image's user.
	st, err := os.Stat(filepath.Join(img.rootfs, "var/lib/anvil/anvil.db"))
	if err != nil {
		t.Fatalf("no database in the volume: %v", err)
	}
	if owner := st.Sys().(*syscall.Stat_t).Uid; owner != uint32(uid) {
		t.Errorf("database owned by %d, not the image user %d", owner, uid)
	}
}

// TestArm64 checks the arm64 image without running it (that would need
// qemu-user and binfmt): its platform, and that its anvil and ipmitool
// are aarch64 programs whose libraries are all in the image.
func TestArm64(t *testing.T) {
	d := mustDist(t)
	checkStatic(t, binary(t, "arm64"), elf.EM_AARCH64)
	img := readImage(t, only(t, filepath.Join(d, "anvil-*-linux-arm64.oci.tar")))
	if img.config.OS != "linux" || img.config.Architecture != "arm64" {
		t.Errorf("platform %s/%s, want linux/arm64", img.config.OS, img.config.Architecture)
	}
	want, _ := os.ReadFile(binary(t, "arm64"))
	if !bytes.Equal(img.bin, want) {
		t.Error("the arm64 image's /usr/bin/anvil is not the arm64 binary")
	}
	checkStatic(t, filepath.Join(img.rootfs, "usr/bin/anvil"), elf.EM_AARCH64)
	checkLinked(t, img.rootfs, elf.EM_AARCH64, "aarch64-linux-gnu", "/usr/bin/ipmitool")
}

// checkLinked is ldd for a foreign root: each program and, in turn, each
// library it needs must be an ELF file for machine, with its interpreter
// and every DT_NEEDED library found in root where the dynamic loader
// looks without an ld.so.cache (the multiarch directories, then /lib and
// /usr/lib; Debian's glibc searches them by default).
func checkLinked(t *testing.T, root string, machine elf.Machine, triplet string, programs ...string) {
	t.Helper()
	dirs := []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}
	seen := map[string]bool{}
	todo := slices.Clone(programs)
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		f, err := elf.Open(resolveIn(t, root, p))
		if err != nil {
			t.Errorf("%s in the image: %v", p, err)
			continue
		}
		if f.Machine != machine {
			t.Errorf("%s in the image is for %v, want %v", p, f.Machine, machine)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(prog.Open())
				interp := strings.TrimRight(string(b), "\x00")
				if _, err := os.Stat(resolveIn(t, root, interp)); err != nil {
					t.Errorf("%s: its interpreter %s is not in the image", p, interp)
				}
			}
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
	lib:
		for _, l := range libs {
			for _, d := range dirs {
				if _, err := os.Stat(resolveIn(t, root, d+"/"+l)); err == nil {
					todo = append(todo, d+"/"+l)
					continue lib
				}
			}
			t.Errorf("%s needs %s, which is not in the image", p, l)
		}
	}
	if len(seen) < 5 {
		t.Errorf("only %v: ipmitool links libc, libfreeipmi, libreadline and libcrypto", slices.Sorted(maps.Keys(seen)))
	}
}

// resolveIn follows symbolic links in root's last path element as a
// process chrooted into root would (absolute targets are root's).
func resolveIn(t *testing.T, root, p string) string {
	t.Helper()
	for range 40 {
		full := filepath.Join(root, p)
		fi, err := os.Lstat(full)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return full
		}
		target, err := os.Readlink(full)
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	t.Fatalf("%s: too many links", p)
	return ""
}
