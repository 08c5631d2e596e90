package conductor

import "testing"

// TestParsePortRange reads Ironic's <start>:<end> and refuses anything
// else, so a mistyped --console-port-range stops the server at start.
func TestParsePortRange(t *testing.T) {
	for in, want := range map[string][2]int{"": {0, 0}, "10000:20000": {10000, 20000}, "5:5": {5, 5}} {
		lo, hi, err := ParsePortRange(in)
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("%q: %d %d %v, want %v", in, lo, hi, err, want)
		}
	}
	for _, in := range []string{"10000", "20000:10000", "0:10", "1:65536", "a:b", "1:2:3", " 1:2"} {
		if _, _, err := ParsePortRange(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
