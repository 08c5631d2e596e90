package bmc_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc"
)

// testCAPEM is a freshly made self-signed certificate, PEM-encoded.
func testCAPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func redfishInfo(ca any) map[string]any {
	return map[string]any{"redfish_address": "https://127.0.0.1:1", "redfish_verify_ca": ca}
}

// TestCAPathRules: a CA bundle path is read only for a system-scope
// caller, only under the CA directory, only when it is a regular file of
// at most 1 MiB; FIFOs, devices, directories, sparse giants and links out
// of the directory are refused without blocking or reading them. The
// same holds at connection time, where the answer is one fixed sentence.
func TestCAPathRules(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	ca := testCAPEM(t)
	good := filepath.Join(dir, "ca.pem")
	must(t, os.WriteFile(good, []byte(ca), 0o600))
	must(t, os.WriteFile(filepath.Join(outside, "ca.pem"), []byte(ca), 0o600))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	sparse := filepath.Join(dir, "sparse.pem")
	must(t, os.WriteFile(sparse, []byte(ca), 0o600))
	must(t, os.Truncate(sparse, 2<<30))
	must(t, os.WriteFile(filepath.Join(dir, "big.pem"), []byte(ca+strings.Repeat("#", bmc.MaxCAFileBytes)), 0o600))
	must(t, os.Symlink(filepath.Join(outside, "ca.pem"), filepath.Join(dir, "escape.pem")))
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero.pem")))
	must(t, os.Symlink(good, filepath.Join(dir, "link.pem")))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "empty.pem"), []byte("no certificate here"), 0o600))

	bmc.SetCADir("")
	if err := bmc.CheckPaths("redfish", redfishInfo(good), nil, true); err == nil {
		t.Fatal("a path was accepted with no CA directory configured")
	}
	bmc.SetCADir(dir)
	if err := bmc.CheckPaths("redfish", redfishInfo("ca.pem"), nil, true); err == nil {
		t.Fatal("a relative path was accepted")
	}
	defer bmc.SetCADir("")

	for _, p := range []string{good, filepath.Join(dir, "link.pem"), filepath.Join(dir, "sub", "..", "ca.pem")} {
		if err := bmc.CheckPaths("redfish", redfishInfo(p), nil, true); err != nil {
			t.Errorf("%s from system scope: %v", p, err)
		}
		c, err := bmc.Open("redfish", "n1", redfishInfo(p), fast)
		if err != nil {
			t.Errorf("%s at connection time: %v", p, err)
		} else {
			c.Close()
		}
	}
	var refusedAtConnect string
	for _, p := range []string{
		filepath.Join(dir, "fifo"), sparse, filepath.Join(dir, "big.pem"), filepath.Join(dir, "escape.pem"),
		filepath.Join(dir, "zero.pem"), filepath.Join(dir, "sub"), filepath.Join(dir, "empty.pem"),
		filepath.Join(outside, "ca.pem"), filepath.Join(dir, "missing.pem"), "/dev/zero", "/etc/shadow",
		filepath.Join(dir, "..", filepath.Base(outside), "ca.pem"),
	} {
		var fe *bmc.FieldError
		err := bmc.CheckPaths("redfish", redfishInfo(p), nil, true)
		if !errors.As(err, &fe) || fe.Field != "driver_info/redfish_verify_ca" {
			t.Errorf("%s from system scope: %v, want a field error", p, err)
		}
		_, err = bmc.Open("redfish", "n1", redfishInfo(p), fast)
		if !errors.As(err, &fe) || fe.Field != "driver_info/redfish_verify_ca" {
			t.Errorf("%s at connection time: %v, want a field error", p, err)
			continue
		}
		if refusedAtConnect == "" {
			refusedAtConnect = err.Error()
		}
		if err.Error() != refusedAtConnect || strings.Contains(err.Error(), p) {
			t.Errorf("%s at connection time says something about the file: %v", p, err)
		}
	}
}

// TestCAPathFromProjectScope: a project-scoped caller giving any path is
// refused with one sentence, whether the file exists or not; a path
// already stored and left unchanged passes (connections check it), and
// booleans and inline bundles pass for everyone.
func TestCAPathFromProjectScope(t *testing.T) {
	dir := t.TempDir()
	ca := testCAPEM(t)
	good := filepath.Join(dir, "ca.pem")
	must(t, os.WriteFile(good, []byte(ca), 0o600))
	bmc.SetCADir(dir)
	defer bmc.SetCADir("")
	var first string
	for _, p := range []string{good, filepath.Join(dir, "missing.pem"), "/dev/zero", "/etc/shadow"} {
		err := bmc.CheckPaths("redfish", redfishInfo(p), nil, false)
		var fe *bmc.FieldError
		if !errors.As(err, &fe) || fe.Field != "driver_info/redfish_verify_ca" {
			t.Fatalf("%s from project scope: %v", p, err)
		}
		if first == "" {
			first = err.Error()
		}
		if err.Error() != first {
			t.Fatalf("%s: the refusal differs by file: %q vs %q", p, err, first)
		}
	}
	if err := bmc.CheckPaths("redfish", redfishInfo(good), redfishInfo(good), false); err != nil {
		t.Fatalf("an unchanged stored path: %v", err)
	}
	for _, v := range []any{true, false, "true", "False", ca} {
		if err := bmc.CheckPaths("redfish", redfishInfo(v), nil, false); err != nil {
			t.Fatalf("%v from project scope: %v", v, err)
		}
		if err := bmc.Validate("redfish", redfishInfo(v)); err != nil {
			t.Fatalf("%v: %v", v, err)
		}
	}
	for _, v := range []any{"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
		"-----BEGIN CERTIFICATE-----", ca + strings.Repeat("\n", bmc.MaxInlineCABytes), 3, "maybe"} {
		if err := bmc.Validate("redfish", redfishInfo(v)); err == nil {
			t.Fatalf("%.40v was accepted", v)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
