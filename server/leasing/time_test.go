package leasing

import (
	"strings"
	"testing"
	"time"
)

// TestParseTime: the forms ESI-Leap's clients send (Python's isoformat
// with and without microseconds and a zone, a space for T, a date) read
// as UTC to the second; anything else is a 400 naming the field.
func TestParseTime(t *testing.T) {
	want := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, in := range []string{"2030-01-02T15:04:05", "2030-01-02T15:04:05.123456", "2030-01-02 15:04:05",
		"2030-01-02T15:04:05Z", "2030-01-02T17:04:05+02:00", "2030-01-02T15:04:05.5+00:00"} {
		got, err := ParseTime("start_time", in)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if got, err := ParseTime("end_time", "2030-01-02"); err != nil || !got.Equal(time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("a date: %v, %v", got, err)
	}
	for _, in := range []string{"", "tomorrow", "2030-13-02T15:04:05", "1704067200"} {
		if _, err := ParseTime("end_time", in); err == nil || !strings.Contains(err.Error(), "end_time") {
			t.Errorf("ParseTime(%q): %v, want an error naming end_time", in, err)
		}
	}
	if got := Format(time.Date(2030, 1, 2, 17, 4, 5, 0, time.FixedZone("x", 2*3600))); got != "2030-01-02T15:04:05" {
		t.Errorf("Format: %s", got)
	}
}

// TestHoursWithin: the part of a lease in a month, as the node-hours
// quota counts it.
func TestHoursWithin(t *testing.T) {
	day := func(d, h int) time.Time { return time.Date(2030, 1, d, h, 0, 0, 0, time.UTC) }
	feb := time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		start, end time.Time
		want       float64
	}{
		{day(2, 0), day(3, 0), 24},
		{day(31, 12), feb.Add(24 * time.Hour), 12},
		{day(1, 0).Add(-time.Hour), day(1, 2), 2},
		{feb, feb.Add(time.Hour), 0},
	} {
		if got := hoursWithin(c.start, c.end, day(1, 0), feb); got != c.want {
			t.Errorf("hoursWithin(%v, %v) = %v, want %v", c.start, c.end, got, c.want)
		}
	}
}
