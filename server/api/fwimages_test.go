package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// multipartBody is a form with the given fields, the "file" one as a
// file part.
func multipartBody(t *testing.T, fields [][2]string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		var err error
		if f[0] == "file" {
			var fw io.Writer
			if fw, err = w.CreateFormFile("file", "from-form.bin"); err == nil {
				_, err = fw.Write([]byte(f[1]))
			}
		} else {
			err = w.WriteField(f[0], f[1])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), w.FormDataContentType()
}

// upload posts body with content type ct (raw when empty).
func upload(t *testing.T, c *servertest.Client, query string, body io.Reader, ct string) *servertest.Response {
	t.Helper()
	if ct == "" {
		ct = "application/octet-stream"
	}
	return c.DoRaw(t, "POST", "/v1/anvil/firmware-images"+query, body, ct)
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// TestFirmwareImages uploads images raw and as a form, lists them, has
// them downloaded without credentials byte for byte from the URL the
// listing gives, refuses bad uploads naming the field (leaving nothing
// behind), and deletes them; each upload and deletion is audited.
func TestFirmwareImages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		dir := t.TempDir()
		srv, clients := startLocal(t, setting, server.Options{FirmwareDir: dir, FirmwareMaxBytes: 4096})
		admin := clients["system-admin"]
		raw := bytes.Repeat([]byte("bios image "), 300) // 3300 bytes
		r := upload(t, admin, "?name=bios-2.0.bin", bytes.NewReader(raw), "")
		mustStatus(t, r, 201)
		img := r.JSON(t)
		wantURL := srv.URL + "/firmware/" + sum(raw) + "/bios-2.0.bin"
		if img["sha256"] != sum(raw) || img["size"] != float64(len(raw)) || img["name"] != "bios-2.0.bin" || img["url"] != wantURL {
			t.Fatalf("upload answered %v, want sha256 %s size %d url %s", img, sum(raw), len(raw), wantURL)
		}
		if b, err := os.ReadFile(filepath.Join(dir, sum(raw), "bios-2.0.bin")); err != nil || !bytes.Equal(b, raw) {
			t.Fatalf("stored file: %v (equal %v)", err, bytes.Equal(b, raw))
		}
		form, ct := multipartBody(t, [][2]string{{"name", "bmc-5.1.bin"}, {"file", "bmc image"}})
		r = upload(t, admin, "", bytes.NewReader(form), ct)
		mustStatus(t, r, 201)
		if got := r.JSON(t); got["name"] != "bmc-5.1.bin" || got["sha256"] != sum([]byte("bmc image")) {
			t.Fatalf("form upload answered %v", got)
		}
		// Without a name field, the file part's name is the image's.
		form, ct = multipartBody(t, [][2]string{{"file", "other image"}})
		mustStatus(t, upload(t, admin, "", bytes.NewReader(form), ct), 201)

		r = admin.Do(t, "GET", "/v1/anvil/firmware-images", nil)
		mustStatus(t, r, 200)
		var names []string
		for _, x := range r.JSON(t)["firmware_images"].([]any) {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		if strings.Join(names, ",") != "bios-2.0.bin,bmc-5.1.bin,from-form.bin" {
			t.Errorf("listed %v", names)
		}

		// A BMC downloads without credentials.
		resp, err := http.Get(wantURL)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, raw) || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("download: %d %s, %d bytes (want %d)", resp.StatusCode, resp.Header.Get("Content-Type"), len(got), len(raw))
		}
		for _, path := range []string{"/firmware/" + sum(raw) + "/other.bin", "/firmware/" + strings.Repeat("0", 64) + "/bios-2.0.bin", "/firmware/nothex/bios-2.0.bin", "/firmware/" + sum(raw) + "/..%2F..%2Fanvil.db"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
			}
		}

		// Bad uploads: 400 naming the field, 413 over the limit, and
		// nothing stored.
		formNoFile, ctNoFile := multipartBody(t, [][2]string{{"name", "x.bin"}})
		formOdd, ctOdd := multipartBody(t, [][2]string{{"colour", "red"}, {"file", "x"}})
		formBadName, ctBadName := multipartBody(t, [][2]string{{"name", "a b"}, {"file", "x"}})
		for _, tc := range []struct {
			query, ct string
			body      []byte
			status    int
			field     string
		}{
			{"", "", raw, 400, "name"},
			{"?name=../etc/passwd", "", raw, 400, "name"},
			{"?name=.hidden", "", raw, 400, "name"},
			{"?name=" + strings.Repeat("a", 129), "", raw, 400, "name"},
			{"?name=empty.bin", "", nil, 400, "image is empty"},
			{"?name=big.bin", "", bytes.Repeat([]byte("x"), 4097), 413, "larger than 4096 bytes"},
			{"?name=x.bin", ctNoFile, formNoFile, 400, "name"},
			{"", ctNoFile, formNoFile, 400, "no file part"},
			{"", ctOdd, formOdd, 400, "colour"},
			{"", ctBadName, formBadName, 400, `"a b"`},
			{"?colour=red", "", raw, 400, "colour"},
		} {
			r := upload(t, admin, tc.query, bytes.NewReader(tc.body), tc.ct)
			if r.Status != tc.status || !strings.Contains(r.Fault(t), tc.field) {
				t.Errorf("upload %s (%s, %d bytes): %d %q, want %d naming %s", tc.query, tc.ct, len(tc.body), r.Status, r.Fault(t), tc.status, tc.field)
			}
		}
		// A chunked body declares no length: the store stops it at the limit.
		r = upload(t, admin, "?name=chunked.bin", io.MultiReader(bytes.NewReader(raw), bytes.NewReader(raw)), "")
		if r.Status != 413 {
			t.Errorf("chunked upload over the limit: %d %s", r.Status, r.Body)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 4 { // three hashes and the incoming directory
			t.Errorf("image directory holds %d entries after refused uploads, want 4", len(entries))
		}
		if tmp, _ := os.ReadDir(filepath.Join(dir, ".incoming")); len(tmp) != 0 {
			t.Errorf("%d temporary files left behind", len(tmp))
		}

		mustStatus(t, admin.Do(t, "DELETE", "/v1/anvil/firmware-images/"+sum(raw), nil), 204)
		mustStatus(t, admin.Do(t, "DELETE", "/v1/anvil/firmware-images/"+sum(raw), nil), 404)
		mustStatus(t, admin.Do(t, "DELETE", "/v1/anvil/firmware-images/NOTHEX", nil), 400)
		if resp, err := http.Get(wantURL); err != nil || resp.StatusCode != 404 {
			t.Errorf("download after delete: %v %v", resp.StatusCode, err)
		}

		// The audit log names who uploaded and deleted what.
		r = admin.Do(t, "GET", "/v1/events?rule=anvil:firmware_image:create&target_id="+sum(raw), nil)
		mustStatus(t, r, 200)
		evs := r.JSON(t)["events"].([]any)
		if len(evs) != 1 || evs[0].(map[string]any)["user"] != "system-admin" || evs[0].(map[string]any)["result"] != "allowed" {
			t.Errorf("upload audit: %v", evs)
		}
		r = admin.Do(t, "GET", "/v1/events?rule=anvil:firmware_image:delete&target_id="+sum(raw), nil)
		if evs := r.JSON(t)["events"].([]any); len(evs) != 2 {
			t.Errorf("delete audit (one done, one not found): %v", evs)
		}
		r = admin.Do(t, "GET", "/v1/events?rule=anvil:firmware_image:create&result=failed", nil)
		if evs := r.JSON(t)["events"].([]any); len(evs) < 10 {
			t.Errorf("refused uploads audited: %d", len(evs))
		}
	})
}

// repeat is an endless reader of one byte value, allocating nothing.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestFirmwareImageStreamed uploads an image 64 times the API's body
// limit and checks it reached the disk whole without the server holding
// it in memory: the process allocates far less than the image's size.
func TestFirmwareImageStreamed(t *testing.T) {
	const size = 64 << 20
	_, clients := startLocal(t, storetest.Setting(t, "sqlite"), server.Options{FirmwareMaxBytes: 2 * size})
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(repeat('f'), size)); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := upload(t, clients["system-admin"], "?name=big.bin", io.LimitReader(repeat('f'), size), "")
	runtime.ReadMemStats(&after)
	mustStatus(t, r, 201)
	if got := r.JSON(t); got["size"] != float64(size) || got["sha256"] != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("upload answered %v", got)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
		t.Errorf("uploading %d MiB allocated %d MiB: the body was buffered", size>>20, alloc>>20)
	}
}
