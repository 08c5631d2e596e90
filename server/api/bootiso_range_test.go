package api

import "testing"

// A BMC's Range header: one range, clipped to the file; anything else
// is unsatisfiable.
func TestByteRange(t *testing.T) {
	for _, c := range []struct {
		h          string
		start, end int64
		ok         bool
	}{
		{"bytes=0-9", 0, 9, true},
		{"bytes=90-", 90, 99, true},
		{"bytes=-10", 90, 99, true},
		{"bytes=-1000", 0, 99, true},
		{"bytes=50-1000", 50, 99, true},
		{"bytes=100-", 0, 0, false},
		{"bytes=9-0", 0, 0, false},
		{"bytes=0-1,5-6", 0, 0, false},
		{"bytes=-0", 0, 0, false},
		{"items=0-1", 0, 0, false},
		{"bytes=x-1", 0, 0, false},
	} {
		s, e, ok := byteRange(c.h, 100)
		if ok != c.ok || ok && (s != c.start || e != c.end) {
			t.Errorf("%s: %d-%d %v, want %d-%d %v", c.h, s, e, ok, c.start, c.end, c.ok)
		}
	}
}
