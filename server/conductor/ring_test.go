package conductor

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
)

func ringUUIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	return ids
}

// TestRingSpreadsEvenly: three conductors each get close to a third.
func TestRingSpreadsEvenly(t *testing.T) {
	ids := ringUUIDs(30000)
	r := NewRing([]string{"a", "b", "c"})
	share := map[string]int{}
	for _, id := range ids {
		share[r.Owner(id)]++
	}
	t.Logf("shares of %d nodes: %v", len(ids), share)
	if len(share) != 3 {
		t.Fatalf("owners %v, want exactly a, b and c", share)
	}
	for h, n := range share {
		if f := float64(n) / float64(len(ids)); f < 0.25 || f > 0.42 {
			t.Errorf("%s owns %.1f%% of the nodes, want about a third (%v)", h, f*100, share)
		}
	}
}

// TestRingStability: a fourth conductor takes about a quarter of the
// nodes, all from the other three, and none move between the three; its
// leaving gives every node back to its previous owner.
func TestRingStability(t *testing.T) {
	ids := ringUUIDs(20000)
	three := NewRing([]string{"a", "b", "c"})
	four := NewRing([]string{"c", "a", "d", "b"})
	moved := 0
	for _, id := range ids {
		before, after := three.Owner(id), four.Owner(id)
		if before == after {
			continue
		}
		moved++
		if after != "d" {
			t.Fatalf("node %s moved from %s to %s; only moves to the new conductor are allowed", id, before, after)
		}
	}
	t.Logf("adding d moved %d of %d nodes", moved, len(ids))
	if f := float64(moved) / float64(len(ids)); f < 0.18 || f > 0.32 {
		t.Errorf("adding a 4th conductor moved %.1f%% of nodes, want about 25%%", f*100)
	}
	again := NewRing([]string{"b", "c", "a"})
	for _, id := range ids {
		if again.Owner(id) != three.Owner(id) {
			t.Fatalf("node %s: a ring over the same conductors in another order disagrees", id)
		}
	}
}

func TestRingEdges(t *testing.T) {
	if got := NewRing(nil).Owner("x"); got != "" {
		t.Errorf("empty ring owner %q", got)
	}
	var rs Rings = map[string]*Ring{"": NewRing([]string{"a"})}
	if got := rs.Owner("x", "rack2"); got != "" {
		t.Errorf("a group without conductors maps to %q, want none", got)
	}
	one := NewRing([]string{"only"})
	for i := range 100 {
		if got := one.Owner(fmt.Sprint(i)); got != "only" {
			t.Fatalf("single-conductor ring maps to %q", got)
		}
	}
}
