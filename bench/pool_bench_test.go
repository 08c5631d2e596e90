package bench

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkShowThroughput serves show and a 50-node detailed list page
// over the 10,000-node fleet at 1, 8 and 32 concurrent clients, each
// -benchtime Nx being N requests per run, and reports req/s, p50/p99 and
// how many database connections the server opened, and closed for being
// over the idle limit, during the run (from its go_sql_* metrics), after
// a warm-up at the same concurrency. "idle16" is the pool before
// --db-max-idle defaulted to --db-max-open; "default" is the pool as
// shipped.
//
//	go test -run '^$' -bench ShowThroughput -benchtime 5000x ./bench/
func BenchmarkShowThroughput(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			for _, pool := range []struct {
				name  string
				flags []string
			}{
				{"idle16", []string{"--db-max-open", "32", "--db-max-idle", "16"}},
				{"default", nil},
			} {
				b.Run(pool.name, func(b *testing.B) {
					srv := serve(b, f.setting, pool.flags...)
					for _, req := range []struct{ name, path string }{
						{"show", "/v1/nodes/" + f.showID},
						{"list-50", "/v1/nodes?detail=true&limit=50"},
					} {
						for _, clients := range []int{1, 8, 32} {
							b.Run(fmt.Sprintf("%s/c=%d", req.name, clients), func(b *testing.B) {
								throughput(b, srv, srv.url+req.path, clients)
							})
						}
					}
				})
			}
		})
	}
}

// serve starts `anvil serve` on setting with extra flags, stopped when
// the benchmark ends.
func serve(b *testing.B, setting string, flags ...string) *server {
	port := freePort(b)
	args := append([]string{"serve", "--auth", "none", "--listen", "127.0.0.1:" + port, "--database", setting, "--log-level", "warn"}, flags...)
	cmd := exec.Command(binary(b), args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := &server{url: "http://127.0.0.1:" + port, cmd: cmd}
	waitReady(b, s.url)
	return s
}

// throughput sends b.N requests from clients goroutines, each on its own
// kept-alive HTTP connection, so every new database connection is the
// server's doing.
func throughput(b *testing.B, srv *server, url string, clients int) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	do := func() error {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return err
	}
	// Warm up at full concurrency, so the pool has grown to what this
	// load needs: what opens during the run is churn, not growth.
	var warm sync.WaitGroup
	for range clients {
		warm.Go(func() {
			for range 20 {
				if err := do(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	warm.Wait()
	before := poolStats(b, srv)
	lat := make([]time.Duration, b.N)
	next := make(chan int)
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for i := range next {
				t := time.Now()
				if err := do(); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
				lat[i] = time.Since(t)
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	after := poolStats(b, srv)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	closed := after.closed() - before.closed()
	b.ReportMetric(after["go_sql_open_connections"]-before["go_sql_open_connections"]+closed, "db-conns-opened")
	b.ReportMetric(after["go_sql_max_idle_closed_total"]-before["go_sql_max_idle_closed_total"], "max-idle-closed")
}

type stats map[string]float64

// closed counts connections the pool closed on its own; with the open
// count it gives how many it opened.
func (s stats) closed() float64 {
	return s["go_sql_max_idle_closed_total"] + s["go_sql_max_idle_time_closed_total"] + s["go_sql_max_lifetime_closed_total"]
}

// poolStats reads the server's go_sql_* metrics.
func poolStats(b *testing.B, srv *server) stats {
	resp, err := http.Get(srv.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	s := stats{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), `{db_name="anvil"} `)
		if !ok || !strings.HasPrefix(name, "go_sql_") {
			continue
		}
		v, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			b.Fatalf("metric %s: %v", name, err)
		}
		s[name] = v
	}
	if _, ok := s["go_sql_open_connections"]; !ok {
		b.Fatal("the server's /metrics has no go_sql_open_connections")
	}
	return s
}
