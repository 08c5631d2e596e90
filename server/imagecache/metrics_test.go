package imagecache_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anvilproject/anvil/server/imagecache"
)

// TestCacheMetrics fetches real images from an origin and reads the
// cache's metrics as Prometheus scrapes them, over HTTP: a download is a
// miss, the same image again a hit, a wrong checksum and an image over
// the cap failures with their reasons, a full cache an eviction, and the
// bytes are what the directory holds.
func TestCacheMetrics(t *testing.T) {
	a, b, big := bytes.Repeat([]byte("a"), 600), bytes.Repeat([]byte("b"), 500), bytes.Repeat([]byte("c"), 1001)
	o := newOrigin(t, map[string][]byte{"a": a, "b": b, "big": big})
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	c := &imagecache.Cache{Dir: dir, MaxBytes: 1000, Metrics: imagecache.NewMetrics(reg, dir)}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	ctx := context.Background()

	ta, err := c.Fetch(ctx, "p", o.url+"a", sha(a))
	if err != nil {
		t.Fatal(err)
	}
	ta2, err := c.Fetch(ctx, "p", o.url+"a", sha(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "p", o.url+"b", sha(a)); err == nil {
		t.Fatal("b under a's checksum was accepted")
	}
	if _, err := c.Fetch(ctx, "p", o.url+"big", sha(big)); err == nil {
		t.Fatal("an image over the cap was accepted")
	}
	wantMetrics(t, srv.URL, map[string]float64{
		"anvil_image_cache_misses_total":                                3,
		"anvil_image_cache_hits_total":                                  1,
		`anvil_image_cache_download_failures_total{reason="checksum"}`:  1,
		`anvil_image_cache_download_failures_total{reason="too_large"}`: 1,
		`anvil_image_cache_download_failures_total{reason="fetch"}`:     0,
		"anvil_image_cache_evictions_total":                             0,
		"anvil_image_cache_bytes":                                       600,
	})
	// a is no longer served: b needs its room, and takes it.
	c.Unlink(ta)
	c.Unlink(ta2)
	if _, err := c.Fetch(ctx, "p", o.url+"b", sha(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "p", o.url+"missing", sha(b)); err == nil {
		t.Fatal("a 404 was cached")
	}
	wantMetrics(t, srv.URL, map[string]float64{
		"anvil_image_cache_misses_total":                            5,
		"anvil_image_cache_evictions_total":                         1,
		`anvil_image_cache_download_failures_total{reason="fetch"}`: 1,
		"anvil_image_cache_bytes":                                   500,
	})
}

// wantMetrics scrapes url and checks each series' value.
func wantMetrics(t *testing.T, url string, want map[string]float64) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for series, v := range want {
		var got float64 = -1
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, series+" "); ok {
				if got, err = strconv.ParseFloat(rest, 64); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
			}
		}
		if got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}
