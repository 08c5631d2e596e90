package ratelimit

import (
	"testing"
	"time"
)

// TestBucket: a burst, then refusals with the wait until the next token,
// then one request per 1/rate; keys do not share buckets.
func TestBucket(t *testing.T) {
	now := time.Unix(0, 0)
	l := New(2, 3)
	l.now = func() time.Time { return now }
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst: %v, wait %v", ok, wait)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key refused")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("refused after refilling one token")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("allowed a second request on one refilled token")
	}
}
