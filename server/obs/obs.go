// Package obs is Anvil's observability: request ids, one structured log
// line per request, and Prometheus metrics by route and status.
package obs

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/clientip"
)

// RequestIDHeader is the header Ironic uses for request ids; clients print it.
const RequestIDHeader = "X-Openstack-Request-Id"

// compatRequestIDHeader carries the same id under the name Ironic used
// before its 1.107 (oslo's compat header), which older clients read.
const compatRequestIDHeader = "Openstack-Request-Id"

// Metrics are the HTTP metrics; each App registers its own so tests can run
// several servers in one process.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	routesOnce sync.Once
	routes     map[string][]string // method → its handlers' patterns, in order
}

// patternOf is the pattern of the first handler route that c's method
// and path reach, as fiber's router would pick it; the middleware's own
// path when none does (an unknown path stays unknown). The app's routes
// are all registered before it serves, so they are read once.
func (m *Metrics) patternOf(c *fiber.Ctx) string {
	m.routesOnce.Do(func() {
		m.routes = map[string][]string{}
		for _, r := range c.App().GetRoutes(true) {
			m.routes[r.Method] = append(m.routes[r.Method], r.Path)
		}
	})
	cfg := c.App().Config()
	for _, p := range m.routes[c.Method()] {
		if fiber.RoutePatternMatch(c.Path(), p, cfg) {
			return p
		}
	}
	return c.Route().Path
}

// NewMetrics creates and registers the HTTP metrics plus Go runtime ones.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "anvil_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method"}),
	}
	m.Registry.MustRegister(m.requests, m.latency,
		// Beside the classic memstats: the heap the last collection
		// found live (go_gc_heap_live_bytes) and the soft memory limit
		// (go_gc_gomemlimit_bytes). RSS rises and falls with garbage and
		// the collector's pace; the live heap is what a leak grows.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{
			Matcher: regexp.MustCompile(`^/gc/(heap/live|gomemlimit):bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ParseAccessLog reads the --access-log setting: "on" (or empty) logs
// every request, "off" none, and a rate such as 0.1 about that share of
// them. It returns the share to log.
func ParseAccessLog(s string) (float64, error) {
	switch s {
	case "", "on":
		return 1, nil
	case "off":
		return 0, nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return 0, fmt.Errorf("--access-log %q: use on, off or a sample rate from 0 to 1 such as 0.1", s)
	}
	return r, nil
}

// Middleware assigns the request id, puts request info into the user
// context for auditing, then logs and measures the request when it ends.
// It logs the share sample of requests (see ParseAccessLog), and every
// server error whatever the share, since those are the lines someone
// will look for.
func Middleware(log *slog.Logger, m *Metrics, sample float64) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		rid := c.Get(RequestIDHeader)
		if len(rid) < 8 || len(rid) > 64 {
			rid = "req-" + uuid.NewString()
		}
		c.Set(RequestIDHeader, rid)
		c.Set(compatRequestIDHeader, rid)
		c.SetUserContext(audit.WithRequest(c.UserContext(), audit.Request{ID: rid, Method: c.Method(), Path: c.Path()}))
		err := c.Next()
		if err != nil {
			// Let the app's error handler write the response now, so the
			// status we record is the one the client gets.
			if herr := c.App().ErrorHandler(c, err); herr != nil {
				c.Status(500)
			}
		}
		status := c.Response().StatusCode()
		route := c.Route().Path
		if status >= 400 && !fiber.RoutePatternMatch(c.Path(), route, c.App().Config()) {
			// A middleware mounted on a prefix answered (a 401, a 429)
			// before routing reached the handler: count it under the route
			// it asked for, not the middleware's mount point, so refusals
			// show per API. Only refusals are looked at: a request that
			// succeeds reached its handler.
			route = m.patternOf(c)
		}
		if status == 404 && route == "/" && c.Path() != "/" {
			route = "unmatched"
		}
		d := time.Since(start)
		m.requests.WithLabelValues(route, c.Method(), strconv.Itoa(status)).Inc()
		m.latency.WithLabelValues(route, c.Method()).Observe(d.Seconds())
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		} else if sample < 1 && (sample == 0 || rand.Float64() >= sample) {
			return nil
		}
		log.LogAttrs(c.UserContext(), level, "request",
			slog.String("request_id", rid), slog.String("method", c.Method()), slog.String("path", c.Path()),
			slog.Int("status", status), slog.Duration("duration", d), slog.String("remote", clientip.Of(c)))
		return nil
	}
}
