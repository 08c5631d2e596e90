package testport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsBelowTheEphemeralRange: ports are bindable, below the range
// outgoing connections use, distinct, and held against every other
// taker for the test's life.
func TestPortsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 20 {
		p := TCP(t)
		if p < lowest || p >= low {
			t.Fatalf("port %d outside %d-%d", p, lowest, low-1)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if _, ok := reserve(p); ok {
			t.Fatalf("port %d reserved again while held", p)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
	if p := UDP(t); p < lowest || p >= low {
		t.Fatalf("udp port %d outside %d-%d", p, lowest, low-1)
	}
}
