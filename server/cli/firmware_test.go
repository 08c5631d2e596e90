package cli_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
)

// TestFirmwareAdd stores an image with the CLI beside the database a
// running server uses, and the server answers the URL the CLI printed
// with the file's bytes.
func TestFirmwareAdd(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	srv := servertest.Start(t, server.Options{Database: db, FirmwareDir: filepath.Join(dir, "firmware")})
	img := filepath.Join(dir, "bios.bin")
	content := bytes.Repeat([]byte{0xA5, 0x5A}, 5000)
	if err := os.WriteFile(img, content, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "", "firmware", "add", img, "--name", "bios-3.0.bin", "--database", db, "--firmware-url", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	url := lines[len(lines)-1]
	if !strings.HasPrefix(url, srv.URL+"/firmware/") || !strings.HasSuffix(url, "/bios-3.0.bin") || !strings.Contains(out, "10000 bytes") {
		t.Fatalf("firmware add printed %q", out)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, content) {
		t.Fatalf("GET %s: %d, %d bytes", url, resp.StatusCode, len(got))
	}
	if out, err := run(t, "", "firmware", "list", "--database", db, "--firmware-url", srv.URL); err != nil || !strings.Contains(out, url) {
		t.Errorf("firmware list: %v\n%s", err, out)
	}
	// The audit log records the CLI's upload as the server's would.
	n, err := srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:firmware_image:create"), auditevent.ResultEQ("allowed")).Count(context.Background())
	if err != nil || n != 1 {
		t.Errorf("%d audit rows for the upload (%v)", n, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"firmware", "add", img, "--name", "../up"}, `name "../up"`},
		{[]string{"firmware", "add", filepath.Join(dir, "missing.bin")}, "no such file"},
		{[]string{"firmware", "add", img, "--firmware-url", "ftp://anvil"}, "--firmware-url"},
		{[]string{"firmware", "add", img, "--firmware-max-mib", "0"}, "--firmware-max-mib"},
	} {
		if _, err := run(t, "", append(tc.args, "--database", db)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("anvil %s: %v, want an error naming %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
