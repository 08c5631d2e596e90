package campaigns

import (
	"fmt"
	"slices"
	"strings"
	"time"
	// The binary carries the zone database, so a window's timezone means
	// the same on a host without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
)

// Window is when a campaign may start nodes: on Days (mon…sun; none for
// every day) from From to To ("HH:MM") in Timezone (an IANA zone, UTC
// if empty). A window whose To is earlier than its From runs overnight:
// mon 22:00–06:00 covers Monday night into Tuesday morning.
type Window struct {
	Days     []string `json:"days"`
	From     string   `json:"from"`
	To       string   `json:"to"`
	Timezone string   `json:"timezone"`
}

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// clockMinutes reads "HH:MM" as minutes after midnight.
func clockMinutes(s string) (int, bool) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, false
	}
	return t.Hour()*60 + t.Minute(), true
}

// validate checks a window, naming the field at fault.
func (w *Window) validate() error {
	seen := map[string]bool{}
	for i, d := range w.Days {
		d = strings.ToLower(d)
		if !slices.Contains(weekdays, d) || seen[d] {
			return errs.BadRequest("window.days", "window.days must name days once each as mon, tue, wed, thu, fri, sat or sun, not %q", w.Days[i])
		}
		seen[d] = true
		w.Days[i] = d
	}
	from, ok := clockMinutes(w.From)
	if !ok {
		return errs.BadRequest("window.from", "window.from must be a time of day as HH:MM (22:00), not %q", w.From)
	}
	to, ok := clockMinutes(w.To)
	if !ok {
		return errs.BadRequest("window.to", "window.to must be a time of day as HH:MM (06:00), not %q", w.To)
	}
	if from == to {
		return errs.BadRequest("window.to", "window.to must differ from window.from (%s); leave the window out to start at any time", w.From)
	}
	if w.Timezone == "" {
		w.Timezone = "UTC"
	}
	if _, err := time.LoadLocation(w.Timezone); err != nil || w.Timezone == "Local" {
		return errs.BadRequest("window.timezone", "window.timezone must be an IANA time zone (Europe/Berlin), not %q", w.Timezone)
	}
	return nil
}

// WindowOf returns a campaign's window, nil if it has none.
func WindowOf(c *ent.Campaign) *Window {
	if c.WindowFrom == nil || c.WindowTo == nil {
		return nil
	}
	w := &Window{Days: c.WindowDays, From: *c.WindowFrom, To: *c.WindowTo, Timezone: "UTC"}
	if c.WindowTimezone != nil {
		w.Timezone = *c.WindowTimezone
	}
	return w
}

// Open says whether the window is open at t. An overnight window belongs
// to the day it opens: with days [mon], mon 22:00–06:00 is open on Monday
// from 22:00 and on Tuesday until 06:00.
func (w *Window) Open(t time.Time) bool {
	loc, err := time.LoadLocation(w.Timezone)
	if err != nil {
		// Validated at creation; a zone the binary lost is never open
		// rather than always.
		return false
	}
	t = t.In(loc)
	from, _ := clockMinutes(w.From)
	to, _ := clockMinutes(w.To)
	now := t.Hour()*60 + t.Minute()
	day := func(d time.Weekday) bool { return len(w.Days) == 0 || slices.Contains(w.Days, weekdays[d]) }
	if from < to {
		return day(t.Weekday()) && now >= from && now < to
	}
	return (day(t.Weekday()) && now >= from) || (day((t.Weekday()+6)%7) && now < to)
}

func (w *Window) String() string {
	days := "every day"
	if len(w.Days) > 0 {
		days = strings.Join(w.Days, ",")
	}
	return fmt.Sprintf("%s %s–%s %s", days, w.From, w.To, w.Timezone)
}
