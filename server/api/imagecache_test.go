package api_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/imagecache"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAgentDeployLocalImage is image_download_source=local with the real
// agent: Anvil downloads the image once into its cache, checked against
// the node's checksum, and the agent writes it from a per-deploy URL on
// Anvil that is gone after the deploy. The agent never reaches the
// image's own server. A checksum mismatch fails write_image naming the
// image and the field, with nothing cached, and the digest of what came
// only in history's detail for system scope; an unknown value is a 400
// naming its field.
func TestAgentDeployLocalImage(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		cacheDir := t.TempDir()
		rg := newRig(t, setting, conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second, ImageCacheDir: cacheDir}, 1)
		admin, member, rack, im := rg.cs["system-admin"], rg.cs["owner-member"], rg.rack, rg.im
		sys := rg.sim.Systems[0]
		// The image's own server, which tells Anvil's downloads (Go's
		// client) from anyone else's.
		var (
			mu            sync.Mutex
			anvil, others int
		)
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Downloads only: the HEAD Anvil sends before a deploy
			// (checkImageSource) reads no image.
			mu.Lock()
			switch {
			case r.Method == http.MethodHead:
			case strings.HasPrefix(r.UserAgent(), "Go-http-client/"):
				anvil++
			default:
				others++
			}
			mu.Unlock()
			http.ServeContent(w, r, "disk.raw", time.Time{}, bytes.NewReader(im.RawData))
		}))
		t.Cleanup(origin.Close)
		hits := func() (int, int) { mu.Lock(); defer mu.Unlock(); return anvil, others }

		start := scrape(t, rg.srv.URL)
		id, disk := rg.node(t, 0, "m1", true, nil)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/automated_clean", "value": false}}), 200)
		provision(t, member, id, map[string]any{"target": "provide"}, 202)
		waitFor(t, admin, id, "available", rack)
		setInfo := func(src, sum string) {
			t.Helper()
			mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
				{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": origin.URL + "/disk.raw",
					"image_os_hash_algo": "sha256", "image_os_hash_value": sum, "image_download_source": src}}}), 200)
		}

		// Unknown values, in instance_info or driver_info: 400 naming the field.
		setInfo("swift", im.RawSum)
		r := provision(t, member, id, map[string]any{"target": "active"}, 400)
		if f := r.Fault(t); !strings.Contains(f, "instance_info.image_download_source") {
			t.Errorf("unknown instance_info value: %q", f)
		}
		mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "remove", "path": "/instance_info/image_download_source"}}), 200)
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/image_download_source", "value": "ftp"}}), 200)
		r = provision(t, member, id, map[string]any{"target": "active"}, 400)
		if f := r.Fault(t); !strings.Contains(f, "driver_info.image_download_source") {
			t.Errorf("unknown driver_info value: %q", f)
		}
		// instance_info's value wins over driver_info's.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/driver_info/image_download_source", "value": "http"}}), 200)

		// A wrong checksum: write_image fails naming the image and the
		// field, nothing is cached, the agent was never given a URL.
		wrong := strings.Repeat("0", 64)
		setInfo("local", wrong)
		provision(t, member, id, map[string]any{"target": "active"}, 202)
		n := waitFor(t, admin, id, "deploy failed", rack)
		e, _ := n["last_error"].(string)
		for _, s := range []string{"deploy.write_image", origin.URL + "/disk.raw", "instance_info.image_os_hash_value", wrong} {
			if !strings.Contains(e, s) {
				t.Errorf("last_error %q does not name %s", e, s)
			}
		}
		if files := cached(t, cacheDir); len(files) != 0 {
			t.Errorf("a mismatched image left %v in the cache", files)
		}
		// The digest of what was fetched (the image's own sum here) is
		// for system scope only, in history's detail: a project reads
		// that the image does not match its checksum, never what the
		// URL's content hashes to (#41).
		if le, _ := member.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["last_error"].(string); strings.Contains(le, im.RawSum) || !strings.Contains(le, "does not match its checksum") {
			t.Errorf("the owner's member reads last_error %q", le)
		}
		history := func(c *servertest.Client) string {
			r := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
			mustStatus(t, r, 200)
			return string(r.Body)
		}
		if h := history(member); strings.Contains(h, im.RawSum) || !strings.Contains(h, "does not match its checksum") {
			t.Errorf("the owner's member reads the digest or no mismatch in history: %s", h)
		}
		if h := history(admin); !strings.Contains(h, im.RawSum) {
			t.Errorf("a system admin does not read the fetched image's digest in history: %s", h)
		}
		if a, o := hits(); a != 1 || o != 0 {
			t.Errorf("after the mismatch the image server saw %d downloads by Anvil, %d by others; want 1, 0", a, o)
		}
		// And /metrics counted it: a miss whose download failed its checksum.
		mismatched := scrape(t, rg.srv.URL)
		moved(t, start, mismatched, map[string]float64{
			"anvil_image_cache_misses_total": 1, "anvil_image_cache_hits_total": 0,
			`anvil_image_cache_download_failures_total{reason="checksum"}`: 1,
		})

		// The right checksum: one more download by Anvil, none by the
		// agent, and the disk holds the image.
		setInfo("local", im.RawSum)
		provision(t, member, id, map[string]any{"target": "active"}, 202)
		waitFor(t, admin, id, "active", rack)
		if a, o := hits(); a != 2 || o != 0 {
			t.Errorf("the image server saw %d downloads by Anvil, %d by others; want 2, 0", a, o)
		}
		const part = 2048 * 512
		if got := readAt(t, disk, part, 8<<20); !bytes.Equal(got, im.RawData[part:part+8<<20]) || !bytes.Contains(got, []byte("ANVIL-IMAGE-MARKER")) {
			t.Error("the disk does not hold the image's bytes")
		}
		if files := cached(t, cacheDir); len(files) != 1 || files[0] != imagecache.Name("les", origin.URL+"/disk.raw", imagecache.Checksum{Algo: "sha256", Value: im.RawSum}) {
			t.Errorf("the cache holds %v", files)
		}
		deployed := scrape(t, rg.srv.URL)
		moved(t, mismatched, deployed, map[string]float64{
			"anvil_image_cache_misses_total": 1, `anvil_image_cache_download_failures_total{reason="checksum"}`: 0,
		})
		if b := sample(t, deployed, "anvil_image_cache_bytes"); b != float64(len(im.RawData)) {
			t.Errorf("anvil_image_cache_bytes %v, want the image's %d", b, len(im.RawData))
		}
		// The agent was told a per-deploy URL on Anvil (its log says
		// where it downloaded from), which answers 404 now.
		log, _ := os.ReadFile(rack.Dir + "/" + sys.ID + "/agent/ipa.log")
		urls := regexp.MustCompile(regexp.QuoteMeta(rg.srv.URL)+`/images/[0-9a-f]{64}\b`).FindAllString(string(log), -1)
		if len(urls) == 0 {
			t.Fatalf("the agent's log names no image URL on Anvil:\n%s", rack.Log(sys.ID, 5000))
		}
		// The agent's lookup shows it instance_info, image_source
		// included, as Ironic's does; the image server's counts above
		// show it never used it.
		for _, u := range urls {
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Errorf("after the deploy %s answers %d", u, resp.StatusCode)
			}
		}
	})
}

// cached lists the cache directory's files, downloads under way included.
func cached(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, sub := range []string{"", ".incoming"} {
		es, _ := os.ReadDir(dir + "/" + sub)
		for _, e := range es {
			if !e.IsDir() {
				out = append(out, strings.TrimPrefix(sub+"/"+e.Name(), "/"))
			}
		}
	}
	return out
}
