package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkListAfterEnrol: a PostgreSQL server started on an empty
// database (so its start-up statistics say the tables are empty) is given
// 10,000 nodes through the API, and the default node list is read at once
// ("fresh"), then again after a manual ANALYZE ("analyzed"). Issue #31
// asks that the first be within 1.5× of the second: a list must not wait
// for statistics to catch up with the fleet.
//
//	go test -run '^$' -bench ListAfterEnrol -benchtime 200x ./bench/
func BenchmarkListAfterEnrol(b *testing.B) {
	bin := binary(b)
	setting := storetest.Setting(&keepAlive{b}, "postgres")
	port := freePort(b)
	cmd := exec.Command(bin, "serve", "--auth", "none", "--listen", "127.0.0.1:"+port, "--database", setting, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := "http://127.0.0.1:" + port
	waitReady(b, base)

	start := time.Now()
	enrol(b, base, fleet)
	enrolSec := time.Since(start).Seconds()
	list := base + "/v1/nodes?limit=100"

	var fresh, analyzed float64
	b.Run("fresh", func(b *testing.B) {
		fresh = measureRate(b, list)
		// After measuring: ResetTimer drops metrics reported before it.
		b.ReportMetric(float64(fleet)/enrolSec, "enrol-nodes/s")
	})
	db, err := store.Open(context.Background(), setting)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.Analyze(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Run("analyzed", func(b *testing.B) { analyzed = measureRate(b, list) })
	b.Run("ratio", func(b *testing.B) {
		// How many times slower the fresh list is than the analyzed one.
		b.ReportMetric(analyzed/fresh, "fresh/analyzed-x")
	})
}

// enrol creates n fake nodes through POST /v1/nodes from four clients,
// as an operator's enrolment script would.
func enrol(b *testing.B, base string, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("enrol-%05d", i), "driver": "fake",
					"owner": fmt.Sprintf("p%d", i%projects), "resource_class": "baremetal"})
				req, _ := http.NewRequest("POST", base+"/v1/nodes", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					errs <- fmt.Errorf("POST node %d: %d %s", i, resp.StatusCode, msg)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// measureRate is measure's p50 and p95 plus the requests per second one
// client gets, which it returns.
func measureRate(b *testing.B, url string) float64 {
	measure(b, url)
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "req/s")
	return rate
}
