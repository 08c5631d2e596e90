package agenttest

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// MarkerOffset is where an Image holds its marker: inside its one
// partition, which starts at sector 2048, so a test finds the image's
// bytes on a machine's disk after the agent rewrote its partition table.
const MarkerOffset = 2048*512 + 4096

// Image is a whole-disk image for deploy tests, served over loopback
// HTTP as raw and as qcow2: 32 MiB, a GPT with one 8 MiB partition
// (anvil-root) and Marker inside it.
type Image struct {
	URL        string // ends in "/"
	Raw, QCOW2 string // file names under URL
	RawData    []byte
	RawSum     string // sha256, hex
	QCOW2Sum   string
	Marker     string
}

// ServeImage builds an Image holding marker with sgdisk and qemu-img and
// serves it until the test ends.
func ServeImage(t testing.TB, marker string) *Image {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(32 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	run("sgdisk", "-o", "-n", "1:2048:+8M", "-c", "1:anvil-root", raw)
	f, err = os.OpenFile(raw, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(marker), MarkerOffset); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run("qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, filepath.Join(dir, "disk.qcow2"))
	im := &Image{Raw: "disk.raw", QCOW2: "disk.qcow2", Marker: marker}
	if im.RawData, err = os.ReadFile(raw); err != nil {
		t.Fatal(err)
	}
	im.RawSum = sum(t, raw)
	im.QCOW2Sum = sum(t, filepath.Join(dir, "disk.qcow2"))
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	im.URL = srv.URL + "/"
	return im
}

func sum(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
