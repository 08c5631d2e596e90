package imagecache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/imagecache"
)

// origin serves images by name and counts the requests for each.
type origin struct {
	url   string
	files map[string][]byte
	hits  map[string]*atomic.Int32
	// hold, when set, delays every answer until it is closed.
	hold chan struct{}
}

func newOrigin(t *testing.T, files map[string][]byte) *origin {
	o := &origin{files: files, hits: map[string]*atomic.Int32{}}
	for name := range files {
		o.hits[name] = &atomic.Int32{}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		b, ok := o.files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		o.hits[name].Add(1)
		if o.hold != nil {
			<-o.hold
		}
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	o.url = srv.URL + "/"
	return o
}

func sha(b []byte) imagecache.Checksum {
	h := sha256.Sum256(b)
	return imagecache.Checksum{Field: "instance_info.image_os_hash_value", Algo: "sha256", Value: hex.EncodeToString(h[:])}
}

func read(t *testing.T, c *imagecache.Cache, tok string) []byte {
	t.Helper()
	f, _, err := c.Open(tok)
	if err != nil {
		t.Fatalf("open %s: %v", tok, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cached lists the directory's files, temporary ones included; not the
// tokens' links (.tokens), which are names of those files.
func cached(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == ".tokens" {
			return filepath.SkipDir
		}
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return out
}

func TestFetchServesAndReuses(t *testing.T) {
	img := bytes.Repeat([]byte("anvil image "), 10000)
	o := newOrigin(t, map[string][]byte{"disk.raw": img})
	dir := t.TempDir()
	c := &imagecache.Cache{Dir: dir}
	tok, err := c.Fetch(context.Background(), "", o.url+"disk.raw", sha(img))
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Errorf("token %q is not 32 random bytes in hex", tok)
	}
	if !bytes.Equal(read(t, c, tok), img) {
		t.Error("the token does not serve the image's bytes")
	}
	// A second deploy of the same image: a new token, no download.
	tok2, err := c.Fetch(context.Background(), "", o.url+"disk.raw", sha(img))
	if err != nil {
		t.Fatal(err)
	}
	if tok2 == tok {
		t.Error("two deploys share a token")
	}
	if n := o.hits["disk.raw"].Load(); n != 1 {
		t.Errorf("the origin served the image %d times, want 1", n)
	}
	// The same image from the same source is the same file.
	if files := cached(t, dir); len(files) != 1 || files[0] != imagecache.Name("", o.url+"disk.raw", sha(img)) {
		t.Errorf("cache holds %v", files)
	}
	// The same checksum from another source is not served from the
	// cache: whoever names it must be able to download it.
	if _, err := c.Fetch(context.Background(), "", o.url+"elsewhere.raw", sha(img)); err == nil {
		t.Error("a cached image was served for a source that has none")
	}
	c.Unlink(tok)
	if _, _, err := c.Open(tok); !errors.Is(err, imagecache.ErrNotFound) {
		t.Errorf("an unlinked token still opens: %v", err)
	}
	if c.Live(tok) || !c.Live(tok2) {
		t.Error("Live does not follow Unlink")
	}
	if !bytes.Equal(read(t, c, tok2), img) {
		t.Error("the other token stopped serving")
	}
	for _, bad := range []string{"", "../x", strings.Repeat("g", 64), strings.Repeat("0", 64)} {
		if _, _, err := c.Open(bad); !errors.Is(err, imagecache.ErrNotFound) {
			t.Errorf("Open(%q): %v", bad, err)
		}
	}
}

func TestChecksumMismatchLeavesNothing(t *testing.T) {
	img := []byte("the real image")
	o := newOrigin(t, map[string][]byte{"disk.raw": img})
	dir := t.TempDir()
	c := &imagecache.Cache{Dir: dir}
	want := sha([]byte("another image"))
	want.Field = "instance_info.image_checksum"
	_, err := c.Fetch(context.Background(), "", o.url+"disk.raw", want)
	var mm *imagecache.MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("got %v, want a mismatch", err)
	}
	for _, s := range []string{o.url + "disk.raw", "instance_info.image_checksum", want.Value, sha(img).Value} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not name %s", err, s)
		}
	}
	// What a project reads (bmc.Summary's, through the step's failure)
	// says which checksum did not match, never the digest of what came.
	if s := bmc.Summary(err); strings.Contains(s, sha(img).Value) || !strings.Contains(s, "does not match its checksum") || !strings.Contains(s, "instance_info.image_checksum") {
		t.Errorf("summary %q", s)
	}
	if files := cached(t, dir); len(files) != 0 {
		t.Errorf("a mismatch left %v", files)
	}
	// md5 by a bare checksum's length, wrong as well.
	md := imagecache.Checksum{Field: "instance_info.image_checksum", Algo: imagecache.AlgoOf(strings.Repeat("0", 32)), Value: strings.Repeat("0", 32)}
	if _, err := c.Fetch(context.Background(), "", o.url+"disk.raw", md); !errors.As(err, &mm) || mm.Sum.Algo != "md5" {
		t.Errorf("md5: %v", err)
	}
	if files := cached(t, dir); len(files) != 0 {
		t.Errorf("a mismatch left %v", files)
	}
	// A missing image names its address and the answer.
	if _, err := c.Fetch(context.Background(), "", o.url+"missing.raw", sha(img)); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing image: %v", err)
	}
	// A checksum of the wrong length for its algorithm.
	if _, err := c.Fetch(context.Background(), "", o.url+"disk.raw", imagecache.Checksum{Field: "f", Algo: "sha256", Value: "abcd"}); err == nil || !strings.Contains(err.Error(), "f ") {
		t.Errorf("short checksum: %v", err)
	}
}

func TestSizeCapAndEviction(t *testing.T) {
	a, b, big := bytes.Repeat([]byte("a"), 400), bytes.Repeat([]byte("b"), 400), bytes.Repeat([]byte("c"), 1001)
	o := newOrigin(t, map[string][]byte{"a": a, "b": b, "big": big})
	dir := t.TempDir()
	c := &imagecache.Cache{Dir: dir, MaxBytes: 1000}
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "", o.url+"big", sha(big)); err == nil || !strings.Contains(err.Error(), "--image-cache-max-bytes") {
		t.Errorf("an image over the cap: %v", err)
	}
	if files := cached(t, dir); len(files) != 0 {
		t.Errorf("an image over the cap left %v", files)
	}
	ta, err := c.Fetch(ctx, "", o.url+"a", sha(a))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := c.Fetch(ctx, "", o.url+"b", sha(b))
	if err != nil {
		t.Fatal(err)
	}
	// a and b are in use and 800 bytes: a third image of 400 must
	// overflow, and nothing in use is evicted.
	c2 := bytes.Repeat([]byte("2"), 400)
	o2 := newOrigin(t, map[string][]byte{"c": c2})
	tc, err := c.Fetch(ctx, "", o2.url+"c", sha(c2))
	if err != nil {
		t.Fatal(err)
	}
	if len(cached(t, dir)) != 3 {
		t.Errorf("an image in use was evicted: %v", cached(t, dir))
	}
	// b was used last of a and b: once nothing is in use, fetching a
	// new image evicts a, the least recently used.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, imagecache.Name("", o.url+"a", sha(a))), old, old)
	c.Unlink(ta)
	c.Unlink(tb)
	c.Unlink(tc)
	if _, err := c.Fetch(ctx, "", o.url+"b", sha(b)); err != nil { // reuse: b most recent
		t.Fatal(err)
	}
	d := bytes.Repeat([]byte("d"), 100)
	o3 := newOrigin(t, map[string][]byte{"d": d})
	if _, err := c.Fetch(ctx, "", o3.url+"d", sha(d)); err != nil {
		t.Fatal(err)
	}
	files := strings.Join(cached(t, dir), " ")
	if strings.Contains(files, sha(a).Value) || !strings.Contains(files, sha(b).Value) || !strings.Contains(files, sha(d).Value) {
		t.Errorf("after eviction the cache holds %s", files)
	}
}

// TestProjectsShareTheCache (#41): a project that fills the cache
// evicts its own images, not another project's older one, and a project
// that needs room takes it from the largest holder. Plain least-recently-
// used eviction would take the other project's image, the oldest.
func TestProjectsShareTheCache(t *testing.T) {
	imgs := map[string][]byte{}
	for _, n := range []string{"o", "g1", "g2", "g3", "t1"} {
		imgs[n] = bytes.Repeat([]byte(n), 150) // 150 bytes for "o", 300 for the others
	}
	o := newOrigin(t, imgs)
	dir := t.TempDir()
	c := &imagecache.Cache{Dir: dir, MaxBytes: 1000}
	ctx := context.Background()
	fetch := func(project, name string) {
		t.Helper()
		tok, err := c.Fetch(ctx, project, o.url+name, sha(imgs[name]))
		if err != nil {
			t.Fatal(err)
		}
		c.Unlink(tok)
	}
	has := func(project, name string) bool {
		_, err := os.Stat(filepath.Join(dir, imagecache.Name(project, o.url+name, sha(imgs[name]))))
		return err == nil
	}
	fetch("other", "o")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, imagecache.Name("other", o.url+"o", sha(imgs["o"]))), old, old)
	fetch("greedy", "g1")
	fetch("greedy", "g2")
	fetch("greedy", "g3") // 1,200 bytes: greedy's oldest goes
	if !has("other", "o") || has("greedy", "g1") || !has("greedy", "g2") || !has("greedy", "g3") {
		t.Errorf("after greedy's third image the cache holds %v", cached(t, dir))
	}
	fetch("third", "t1") // greedy holds the most: its oldest goes
	if !has("other", "o") || has("greedy", "g2") || !has("greedy", "g3") || !has("third", "t1") {
		t.Errorf("after a third project's image the cache holds %v", cached(t, dir))
	}
	// The same image for two projects is two files: neither's use keeps
	// or evicts the other's.
	fetch("third", "o")
	if !has("other", "o") || !has("third", "o") {
		t.Errorf("one image for two projects: %v", cached(t, dir))
	}
}

func TestConcurrentFetchDownloadsOnce(t *testing.T) {
	img := bytes.Repeat([]byte("x"), 1<<20)
	o := newOrigin(t, map[string][]byte{"disk.raw": img})
	o.hold = make(chan struct{})
	c := &imagecache.Cache{Dir: t.TempDir()}
	var wg sync.WaitGroup
	toks := make([]string, 8)
	errs := make([]error, 8)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			toks[i], errs[i] = c.Fetch(context.Background(), "", o.url+"disk.raw", sha(img))
		}()
	}
	time.Sleep(200 * time.Millisecond)
	close(o.hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if !bytes.Equal(read(t, c, toks[i]), img) {
			t.Errorf("fetch %d serves other bytes", i)
		}
	}
	if n := o.hits["disk.raw"].Load(); n != 1 {
		t.Errorf("the origin served the image %d times, want 1", n)
	}
}

func TestDownloadTimeout(t *testing.T) {
	img := []byte("slow")
	o := newOrigin(t, map[string][]byte{"disk.raw": img})
	o.hold = make(chan struct{})
	defer close(o.hold)
	dir := t.TempDir()
	c := &imagecache.Cache{Dir: dir, Timeout: 200 * time.Millisecond}
	if _, err := c.Fetch(context.Background(), "", o.url+"disk.raw", sha(img)); err == nil {
		t.Fatal("a download past the timeout succeeded")
	}
	if files := cached(t, dir); len(files) != 0 {
		t.Errorf("a timed-out download left %v", files)
	}
}

// TestConductorsShareTheDirectory: two conductors (two Caches, as two
// replicas' processes would have) on one directory serve each other's
// tokens, end them, and neither evicts an image the other's token
// serves; a file replaced under a live token keeps serving its bytes.
func TestConductorsShareTheDirectory(t *testing.T) {
	a1, a2, b := bytes.Repeat([]byte("1"), 400), bytes.Repeat([]byte("2"), 400), bytes.Repeat([]byte("b"), 400)
	o := newOrigin(t, map[string][]byte{"a1": a1, "a2": a2, "b": b})
	dir := t.TempDir()
	ca, cb := &imagecache.Cache{Dir: dir, MaxBytes: 1000}, &imagecache.Cache{Dir: dir, MaxBytes: 1000}
	ctx := context.Background()
	tok, err := ca.Fetch(ctx, "", o.url+"a1", sha(a1))
	if err != nil {
		t.Fatal(err)
	}
	if !cb.Live(tok) || !bytes.Equal(read(t, cb, tok), a1) {
		t.Fatal("another conductor does not serve the token")
	}
	// The other conductor reuses the file rather than downloading.
	tok2, err := cb.Fetch(ctx, "", o.url+"a1", sha(a1))
	if err != nil {
		t.Fatal(err)
	}
	if n := o.hits["a1"].Load(); n != 1 {
		t.Errorf("the origin served a1 %d times, want 1", n)
	}
	cb.Unlink(tok2)
	// a1 is in use through ca's token: cb needs room for 800 more bytes
	// and may not take it.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, imagecache.Name("", o.url+"a1", sha(a1))), old, old)
	tb, err := cb.Fetch(ctx, "", o.url+"b", sha(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Fetch(ctx, "", o.url+"a2", sha(a2)); err != nil {
		t.Fatal(err)
	}
	if files := strings.Join(cached(t, dir), " "); !strings.Contains(files, sha(a1).Value) {
		t.Errorf("another conductor evicted an image a token serves: %s", files)
	}
	// Even a file removed under the token serves it to the end.
	os.Remove(filepath.Join(dir, imagecache.Name("", o.url+"a1", sha(a1))))
	if !bytes.Equal(read(t, cb, tok), a1) {
		t.Error("the token stopped serving once its file was removed")
	}
	cb.Unlink(tok)
	if ca.Live(tok) {
		t.Error("a token another conductor ended is still live")
	}
	if _, _, err := ca.Open(tok); !errors.Is(err, imagecache.ErrNotFound) {
		t.Errorf("an ended token opens: %v", err)
	}
	if !bytes.Equal(read(t, ca, tb), b) {
		t.Error("b's token does not serve b on the first conductor")
	}
}
