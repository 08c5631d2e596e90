package soak

import (
	"strings"
	"testing"
	"time"
)

// TestJudge is the flatness check on made-up series sampled every 5 s,
// as the soak samples: what a process does once while warming up
// passes, and so does noise; a leak — steady growth after the warm-up,
// however gentle — fails, and so does a late jump.
func TestJudge(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	series := func(f func(s float64) float64) []point {
		var pts []point
		for s := 0.0; s <= 90; s += 5 {
			pts = append(pts, point{t0.Add(time.Duration(s) * time.Second), f(s)})
		}
		return pts
	}
	warm := t0.Add(40 * time.Second)
	for _, c := range []struct {
		name string
		f    func(s float64) float64
		want string // "" flat, else part of the problem
	}{
		// Goroutines 35 at start, 55 once pools and the restarted
		// replica's loops are up, then flat with noise.
		{"warm-up then flat", func(s float64) float64 {
			if s < 30 {
				return 35
			}
			return 55 + float64(int(s)%3)
		}, ""},
		{"noise", func(s float64) float64 { return 60 + float64(int(s/5)%2)*4 }, ""},
		// One goroutine leaked every second: 40 more over the judged
		// windows.
		{"steady leak", func(s float64) float64 { return 50 + s }, "kept growing"},
		// A slower leak that still outruns the noise.
		{"slow leak", func(s float64) float64 { return 100 + 0.8*s }, "kept growing"},
		{"late jump", func(s float64) float64 {
			if s >= 70 {
				return 200
			}
			return 50
		}, "grew from"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// As the CI-length soak judges: 10 s windows from 40 s.
			v := judge(series(c.f), warm, 10*time.Second, 2, 12.5)
			if len(v.means) != 5 {
				t.Fatalf("%d windows judged, want 5: %v", len(v.means), v.means)
			}
			if c.want == "" && v.problem != "" || c.want != "" && !strings.Contains(v.problem, c.want) {
				t.Errorf("judged %v as %q, want %q", v.means, v.problem, c.want)
			}
		})
	}
}
