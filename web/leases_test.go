package web_test

import (
	"context"
	"encoding/csv"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestLeasePortal walks the lease pages over the demo fleet: hw-east's
// manager offers a node (one tenant-gold holds by hand, which neither
// tenant below sees) for a week from tomorrow; tenant-blue claims a day
// of it from the offers page and sees it in My leases; tenant-green's
// overlapping claim, claims outside the window and a claim over the
// quota are refused next to the form, an extension past the offer on the
// lease's row; the owner sees the claims, their weekly use and the
// node's calendar; the usage CSV adds up to the leases made, a returned
// booking counting nothing.
func TestLeasePortal(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv := servertest.Start(t, server.Options{Database: setting})
		ctx := context.Background()
		if _, err := demo.Seed(ctx, srv.DB, srv.Firmware, 24); err != nil {
			t.Fatal(err)
		}
		for _, u := range []struct {
			name string
			a    identity.Assignment
		}{
			{"owen", identity.Assignment{Scope: identity.Scope{Project: "hw-east"}, Role: "manager"}},
			{"tina", identity.Assignment{Scope: identity.Scope{Project: "tenant-blue"}, Role: "member"}},
			{"gary", identity.Assignment{Scope: identity.Scope{Project: "tenant-green"}, Role: "member"}},
			{"olga", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"}},
		} {
			if err := srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u.name, u.a); err != nil {
				t.Fatal(err)
			}
		}
		n, err := srv.DB.Node.Query().Where(entnode.Owner("hw-east"), entnode.Lessee("tenant-gold")).Order(entnode.ByName()).First(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name := *n.Name
		owen, tina, gary, olga := signInAs(t, srv, "owen"), signInAs(t, srv, "tina"), signInAs(t, srv, "gary"), signInAs(t, srv, "olga")
		day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
		at := func(d time.Time, h int) string { return d.Add(time.Duration(h) * time.Hour).Format("2006-01-02T15:04") }

		// A tenant may not offer the owner's node: it does not see it.
		offer := url.Values{"nodes": {name}, "start": {at(day, 0)}, "end": {at(day.AddDate(0, 0, 7), 0)}, "properties": {"site=east"}}
		offer.Set("csrf", tina.csrf)
		if st, page, _ := tina.do("POST", "/leases/owner/offer", offer); st != 404 || !strings.Contains(page, "could not be found") {
			t.Errorf("tina offers hw-east's node: %d\n%s", st, page)
		}
		offer.Set("csrf", owen.csrf)
		if st, _, h := owen.do("POST", "/leases/owner/offer", offer); st != 303 || h.Get("Location") != "/leases/owner" {
			t.Fatalf("owen offers %s: %d %s", name, st, h.Get("Location"))
		}
		if st, page, _ := owen.do("POST", "/leases/owner/offer", offer); st != 409 || !strings.Contains(page, "Time conflict") || !strings.Contains(page, `role="alert"`) {
			t.Errorf("offering the same window twice: %d\n%s", st, page)
		}

		_, page, _ := tina.do("GET", "/offers", nil)
		if !strings.Contains(page, `data-testid="offer-`+name+`"`) || !strings.Contains(page, "site=east") || !strings.Contains(page, `aria-current="page">Offers<`) {
			t.Fatalf("tina's offers page lacks the offer:\n%s", page)
		}
		if _, page, _ := tina.do("GET", "/offers?property=site%3Dwest", nil); strings.Contains(page, `data-testid="offer-`+name+`"`) {
			t.Error("a property filter that does not match still lists the offer")
		}
		q := url.Values{"from": {day.AddDate(0, 0, 1).Format("2006-01-02")}, "to": {day.AddDate(0, 0, 2).Format("2006-01-02")}}
		if _, page, _ := tina.do("GET", "/offers?"+q.Encode(), nil); !strings.Contains(page, `data-testid="offer-`+name+`"`) {
			t.Error("a date range inside the offer's window does not list it")
		}
		q.Set("to", day.AddDate(0, 0, 30).Format("2006-01-02"))
		if _, page, _ := tina.do("GET", "/offers?"+q.Encode(), nil); strings.Contains(page, `data-testid="offer-`+name+`"`) {
			t.Error("a date range beyond the offer's window still lists it")
		}
		id := srv.DB.Offer.Query().OnlyX(ctx).UUID

		claim := func(b *browser, from, to string) (int, string, string) {
			t.Helper()
			st, page, h := b.do("POST", "/offers/"+id+"/claim", url.Values{"csrf": {b.csrf}, "start": {from}, "end": {to}})
			return st, page, h.Get("Location")
		}
		if st, _, to := claim(tina, at(day, 9), at(day, 17)); st != 303 || to != "/leases" {
			t.Fatalf("tina claims: %d %s", st, to)
		}
		_, page, _ = tina.do("GET", "/leases", nil)
		if !strings.Contains(page, `data-testid="lease-`+name+`"`) || !strings.Contains(page, "Booked") || !strings.Contains(page, "starts in") {
			t.Errorf("My leases lacks tina's booking:\n%s", page)
		}
		for _, c := range []struct{ from, to, want string }{
			{at(day, 12), at(day, 20), "Time conflict"},
			{at(day, -2), at(day, 4), "has no availabilities"},
			{at(day, 20), "tomorrow", "give a date and time in UTC"},
		} {
			st, page, _ := claim(gary, c.from, c.to)
			if st < 400 || !strings.Contains(page, `data-testid="claim-error"`) || !strings.Contains(page, c.want) {
				t.Errorf("gary claims %s to %s: %d, want %q beside the form", c.from, c.to, st, c.want)
			}
		}
		// A quota refusal says the numbers beside the form. The quota is
		// set between requests, while no handler reads it.
		srv.Leasing.Quota.MaxNodeHours = 10
		if st, page, _ := claim(tina, at(day, 0), at(day, 3)); st != 403 || !strings.Contains(page, "has leases for 8.0 node-hours") || !strings.Contains(page, "its quota is 10 node-hours") {
			t.Errorf("tina claims 3 more hours over a quota of 10: %d\n%s", st, page)
		}
		srv.Leasing.Quota.MaxNodeHours = 0
		if st, _, _ := claim(gary, at(day, 18), at(day, 22)); st != 303 {
			t.Fatalf("gary claims after tina: %d", st)
		}

		lease := srv.DB.Lease.Query().Where().AllX(ctx)
		var tinas, garys string
		for _, l := range lease {
			if l.ProjectID == "tenant-blue" {
				tinas = l.UUID
			} else {
				garys = l.UUID
			}
		}
		st, page, _ := tina.do("POST", "/leases/"+tinas+"/extend", url.Values{"csrf": {tina.csrf}, "end": {at(day.AddDate(0, 0, 9), 0)}})
		if st != 409 || !strings.Contains(page, `data-testid="lease-error"`) {
			t.Errorf("extending past the offer: %d\n%s", st, page)
		}
		if st, _, _ := tina.do("POST", "/leases/"+garys+"/return", url.Values{"csrf": {tina.csrf}}); st != 404 {
			t.Errorf("tina returns gary's lease: %d", st)
		}
		if st, _, _ := gary.do("POST", "/leases/"+garys+"/return", url.Values{"csrf": {gary.csrf}}); st != 303 {
			t.Errorf("gary returns his booking: %d", st)
		}

		_, page, _ = owen.do("GET", "/nodes/"+n.UUID, nil)
		if !strings.Contains(page, `data-testid="calendar-leases"`) || !strings.Contains(page, "tenant-blue") {
			t.Errorf("the node's calendar lacks tina's lease:\n%s", page)
		}
		_, page, _ = owen.do("GET", "/leases/owner", nil)
		if !strings.Contains(page, `data-testid="utilisation"`) || !strings.Contains(page, "<td class=\"num\">8.0</td>") {
			t.Errorf("owner's page lacks the week's 8 node-hours of tenant-blue:\n%s", page)
		}

		// The CSV's node-hours add up to the leases made: tina's 8 hours,
		// gary's returned booking none.
		for _, b := range []*browser{owen, olga} {
			st, body, h := b.do("GET", "/leases/usage.csv", nil)
			if st != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/csv") {
				t.Fatalf("usage CSV: %d %s", st, h.Get("Content-Type"))
			}
			recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
			if err != nil || len(recs) != 3 {
				t.Fatalf("usage CSV: %v\n%s", err, body)
			}
			total := 0.0
			for _, r := range recs[1:] {
				h, _ := strconv.ParseFloat(r[len(r)-1], 64)
				total += h
			}
			if total != 8 {
				t.Errorf("usage CSV adds up to %v node-hours, want 8:\n%s", total, body)
			}
		}
		if _, page, _ := olga.do("GET", "/leases/usage", nil); !strings.Contains(page, `data-testid="usage-total">8.0<`) {
			t.Errorf("usage page total:\n%s", page)
		}
		if _, body, _ := tina.do("GET", "/leases/usage.csv", nil); strings.Count(body, "\n") != 1 {
			t.Errorf("tina's project let no lease, yet its usage lists some:\n%s", body)
		}
	})
}
