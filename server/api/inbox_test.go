package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/notice"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// noticesOf are project's notices, oldest first, as "kind: subject".
func noticesOf(t *testing.T, db *ent.Client, project string) []string {
	t.Helper()
	ns, err := db.Notice.Query().Where(notice.Project(project)).Order(ent.Asc(notice.FieldID)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Kind + ": " + n.Subject
	}
	return out
}

// TestLeaseNotices is issue 43's notices of a lease's life: the owner
// hears of the claim, lessee and owner of the start, the lessee once of
// the end coming within a day (however many passes see it), both of the
// end, and both of the wipe between tenants with how each disk was
// wiped; each notice is an audit row named anvil:notice:<kind>, which
// the webhook sends; no other project hears any of it.
func TestLeaseNotices(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, cs, clk := leasingServer(t, setting, server.Options{})
		admin, owner, les := cs["system-admin"], cs["owner-member"], cs["lessee-member"]
		base := clk.Now()
		id := fakeNode(t, admin, "note-a")
		r := owner.Do(t, "POST", "/leasing/v1/offers", map[string]any{"resource_uuid": id, "start_time": esiTime(base), "end_time": esiTime(base.Add(7 * 24 * time.Hour))})
		mustStatus(t, r, 201)
		offer := r.JSON(t)["uuid"].(string)
		end := base.Add(3 * 24 * time.Hour)
		r = les.Do(t, "POST", "/leasing/v1/offers/"+offer+"/claim", map[string]any{"start_time": esiTime(base), "end_time": esiTime(end)})
		mustStatus(t, r, 201)
		if got := noticesOf(t, db.Client, "own"); len(got) != 1 || got[0] != "offer_claimed: Project les claimed node note-a from your offer" {
			t.Fatalf("owner's notices after the claim: %q", got)
		}

		pass(t, srv)
		pass(t, srv)
		if got := noticesOf(t, db.Client, "les"); len(got) != 1 || got[0] != "lease_started: Your lease of node note-a has started" {
			t.Fatalf("lessee's notices after the start: %q", got)
		}
		// The lessee deploys; the end comes within a day.
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")
		clk.Set(end.Add(-12 * time.Hour))
		pass(t, srv)
		pass(t, srv)
		got := noticesOf(t, db.Client, "les")
		if len(got) != 2 || got[1] != "lease_ending: Your lease of node note-a ends within a day" {
			t.Fatalf("lessee's notices a day before the end: %q", got)
		}
		n, err := db.Notice.Query().Where(notice.Project("les"), notice.Kind(inbox.LeaseEnding)).Only(context.Background())
		if err != nil || !strings.Contains(n.Body, "ask project own to extend the lease") || !strings.Contains(n.Body, end.UTC().Format("2006-01-02 15:04 UTC")) {
			t.Errorf("the ending notice does not say when or whom to ask: %v %v", n, err)
		}

		clk.Set(end)
		pass(t, srv)
		waitState(t, admin, id, "available")
		// The wipe record is written as cleaning ends, just before the
		// node becomes available.
		var les4 []string
		for range 50 {
			if les4 = noticesOf(t, db.Client, "les"); len(les4) == 4 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The notice says what the wipe record says: a fake node has no
		// agent to wipe it, and says so rather than claiming a wipe.
		recs := leaseWipes(t, admin, id)
		if len(recs) != 1 {
			t.Fatalf("wipe records after the lease: %v", recs)
		}
		wiped := map[string]string{"wiped": "was wiped", "not wiped": "was not wiped", "failed": "'s wipe failed"}[recs[0]["result"].(string)]
		if len(les4) != 4 || les4[2] != "lease_ended: Your lease of node note-a ended" || les4[3] != "node_wiped: Node note-a "+wiped+" after your use" {
			t.Fatalf("lessee's notices after the end (wipe record %v): %q", recs[0]["result"], les4)
		}
		w, err := db.Notice.Query().Where(notice.Project("les"), notice.Kind(inbox.NodeWiped)).Only(context.Background())
		if err != nil || !strings.Contains(w.Body, "Wipe record "+recs[0]["uuid"].(string)) || (recs[0]["result"] == "not wiped" && !strings.Contains(w.Body, "Not wiped: ")) {
			t.Errorf("the wipe notice does not say what the record says: %v %v", w, err)
		}
		own := noticesOf(t, db.Client, "own")
		want := []string{"offer_claimed: Project les claimed node note-a from your offer", "lease_started: Project les's lease of node note-a has started",
			"lease_ended: Project les's lease of node note-a ended", "node_wiped: Node note-a " + wiped + " after project les"}
		if strings.Join(own, "|") != strings.Join(want, "|") {
			t.Errorf("owner's notices:\n got %q\nwant %q", own, want)
		}
		if other := noticesOf(t, db.Client, "oth"); len(other) != 0 {
			t.Errorf("another project heard of the lease: %q", other)
		}
		rows, err := db.AuditEvent.Query().Where(auditevent.RuleHasPrefix(inbox.EventPrefix)).Count(context.Background())
		if err != nil || rows != 8 {
			t.Errorf("audit rows of notices: %d, want 8 (%v)", rows, err)
		}
	})
}
