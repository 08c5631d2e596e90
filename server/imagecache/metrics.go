package imagecache

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the image cache's work: fetches answered from a file
// already there (hits) or by a download (misses), downloads that
// failed, images evicted, and the bytes the cache holds.
type Metrics struct {
	hits, misses, evictions prometheus.Counter
	failures                *prometheus.CounterVec
}

// Download failure reasons, the values of the reason label.
const (
	failChecksum = "checksum"
	failTooLarge = "too_large"
	failFetch    = "fetch"
	failStore    = "store"
)

// NewMetrics creates the image cache metrics for the cache kept in dir
// and registers them with reg.
func NewMetrics(reg prometheus.Registerer, dir string) *Metrics {
	m := &Metrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_hits_total", Help: "Image fetches served from a file already in the cache.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_misses_total", Help: "Image fetches that had to download the image (whether or not the download succeeded).",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_evictions_total", Help: "Images removed from the cache to make room.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_image_cache_download_failures_total",
			Help: "Image downloads that failed, by reason: fetch (the source did not answer or refused), checksum (the bytes did not match), too_large (past --image-cache-max-bytes), store (the cache's disk).",
		}, []string{"reason"}),
	}
	for _, r := range []string{failFetch, failChecksum, failTooLarge, failStore} {
		m.failures.WithLabelValues(r)
	}
	// Read from the directory at each scrape, not counted as images come
	// and go: it is right after a restart too, and a scrape every few
	// seconds reads one directory of at most a few hundred images.
	stored := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "anvil_image_cache_bytes", Help: "Bytes of the images the cache holds (--image-cache-max-bytes bounds them).",
	}, func() float64 { return float64(storedBytes(dir)) })
	reg.MustRegister(m.hits, m.misses, m.evictions, m.failures, stored)
	return m
}

// storedBytes is the size of the cached images in dir.
func storedBytes(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() || !keyRE.MatchString(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
	}
	return total
}

// failed counts a download that failed for reason.
func (m *Metrics) failed(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) hit() {
	if m != nil {
		m.hits.Inc()
	}
}

func (m *Metrics) miss() {
	if m != nil {
		m.misses.Inc()
	}
}

func (m *Metrics) evicted() {
	if m != nil {
		m.evictions.Inc()
	}
}
