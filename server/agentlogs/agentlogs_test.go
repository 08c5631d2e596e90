package agentlogs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

const (
	nodeA = "11111111-1111-1111-1111-111111111111"
	nodeB = "22222222-2222-2222-2222-222222222222"
)

// TestRetention: each node keeps its newest MaxPerNode logs, logs past
// MaxAge go (at a save and at Prune), the oldest go first beyond
// MaxBytes, a log over MaxBytes alone is not kept, and files that are
// not logs stay whatever their age.
func TestRetention(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	s := &Store{Dir: t.TempDir(), MaxPerNode: 3, MaxAge: 24 * time.Hour, MaxBytes: 1000, now: func() time.Time { return now }}
	if err := os.WriteFile(filepath.Join(s.Dir, "README"), []byte("operator's note"), 0o644); err != nil {
		t.Fatal(err)
	}
	save := func(node string, size int) string {
		t.Helper()
		now = now.Add(time.Minute)
		name, err := s.Save(node, make([]byte, size))
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	names := func(node string) []string {
		t.Helper()
		ls, err := s.List(node)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Name)
		}
		return out
	}
	var a []string
	for range 5 {
		a = append(a, save(nodeA, 10))
	}
	b := save(nodeB, 10)
	if got, want := names(nodeA), []string{a[4], a[3], a[2]}; !slices.Equal(got, want) {
		t.Errorf("node A keeps %v, want its newest three %v", got, want)
	}
	if got := names(nodeB); !slices.Equal(got, []string{b}) {
		t.Errorf("node B keeps %v", got)
	}
	// Beyond MaxBytes the oldest go first, whichever node they are of.
	// 975 + 10 (B's) + 10 (A's newest) fit in 1000; A's older two do not.
	big := save(nodeB, 975)
	if got := names(nodeA); len(got) != 1 || got[0] != a[4] {
		t.Errorf("after a large log node A keeps %v, want only %s", got, a[4])
	}
	if got := names(nodeB); !slices.Equal(got, []string{big, b}) {
		t.Errorf("after a large log node B keeps %v", got)
	}
	if _, err := s.Save(nodeA, make([]byte, 1001)); err == nil {
		t.Error("a log larger than MaxBytes was kept")
	}
	// Age, at Prune without a save.
	now = now.Add(25 * time.Hour)
	gone, err := s.Prune()
	if err != nil || len(gone) != 3 {
		t.Errorf("prune after a day removed %v (%v), want all three logs", gone, err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "README")); err != nil {
		t.Errorf("prune removed a file that is not a log: %v", err)
	}
}

// TestOpen: a log opens only under its own node and by its exact name.
func TestOpen(t *testing.T) {
	s := &Store{Dir: t.TempDir(), MaxPerNode: 1}
	name, err := s.Save(nodeA, []byte("tgz"))
	if err != nil {
		t.Fatal(err)
	}
	f, l, err := s.Open(nodeA, name)
	if err != nil || l.Size != 3 {
		t.Fatalf("open %s: %v %v", name, l, err)
	}
	f.Close()
	for _, c := range [][2]string{{nodeB, name}, {nodeA, "../" + name}, {nodeA, "README"}, {nodeA, name + ".x"}} {
		if f, _, err := s.Open(c[0], c[1]); err == nil {
			f.Close()
			t.Errorf("opened %s of node %s", c[1], c[0])
		}
	}
}
