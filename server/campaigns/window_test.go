package campaigns

import (
	"testing"
	"time"
)

// Open follows the window's days, hours and zone; an overnight window
// belongs to the day it opens.
func TestWindowOpen(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(day, h, m int) time.Time { return time.Date(2026, 11, day, h, m, 0, 0, berlin) } // the 23rd is a Monday
	night := &Window{Days: []string{"mon"}, From: "22:00", To: "06:00", Timezone: "Europe/Berlin"}
	day := &Window{Days: []string{"sat", "sun"}, From: "09:00", To: "17:30", Timezone: "UTC"}
	every := &Window{From: "23:00", To: "01:00", Timezone: "Europe/Berlin"}
	for _, tc := range []struct {
		w    *Window
		at   time.Time
		open bool
	}{
		{night, at(23, 21, 59), false},
		{night, at(23, 22, 0), true},
		{night, at(24, 5, 59), true},
		{night, at(24, 6, 0), false},
		{night, at(24, 22, 30), false},                                 // Tuesday night is not Monday's
		{night, at(23, 3, 0), false},                                   // Monday morning is Sunday's night
		{night, time.Date(2026, 11, 23, 21, 30, 0, 0, time.UTC), true}, // 22:30 in Berlin
		{day, time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC), true},
		{day, time.Date(2026, 11, 29, 17, 29, 0, 0, time.UTC), true},
		{day, time.Date(2026, 11, 29, 17, 30, 0, 0, time.UTC), false},
		{day, time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), false},
		{every, at(25, 0, 30), true},
		{every, at(25, 1, 0), false},
	} {
		if got := tc.w.Open(tc.at); got != tc.open {
			t.Errorf("%s at %s: open %v, want %v", tc.w, tc.at, got, tc.open)
		}
	}
}
