package identity

import (
	"context"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestListAndRevokeSessions: the list holds live sessions only, with
// their principal, kind, address and last use, marks the caller's own
// and carries no secret; revoking one by its number ends it (Session no
// longer finds it) and no other, is audited against its principal, and
// a second revoke is a 404.
func TestListAndRevokeSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := newService(db)
		mine, err := s.StartSession(ctx, "root", "10.0.0.1", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		other, err := s.StartSession(ctx, "pat", "10.0.0.2", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartSession(ctx, SSOKey("https://idp", "sub-1"), "10.0.0.3", time.Hour, &SSOUser{Issuer: "https://idp", Subject: "sub-1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartSession(ctx, "gone", "10.0.0.4", -time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.SessionSeen(ctx, other); err != nil {
			t.Fatal(err)
		}
		ss, total, err := s.ListSessions(ctx, SessionQuery{Current: mine})
		if err != nil || total != 3 {
			t.Fatalf("list: %d sessions in all, %v", total, err)
		}
		by := map[string]SessionInfo{}
		for _, x := range ss {
			by[x.Principal] = x
		}
		if len(ss) != 3 || by["gone"].Ref != 0 {
			t.Fatalf("want the three live sessions, got %+v", ss)
		}
		if !by["root"].Current || by["pat"].Current || by["root"].ClientAddr != "10.0.0.1" || by["pat"].Seen == nil {
			t.Errorf("root's is the current one, pat's was seen: %+v", ss)
		}
		if sso := by[SSOKey("https://idp", "sub-1")]; !sso.SSO || by["pat"].SSO {
			t.Errorf("kinds: %+v", ss)
		}
		if ss[0].Principal != "pat" {
			t.Errorf("the session seen last comes first: %+v", ss)
		}
		// A page, and a filter by user in any case.
		if page, total, err := s.ListSessions(ctx, SessionQuery{Offset: 1, Limit: 1}); err != nil || total != 3 || len(page) != 1 || page[0].Ref != ss[1].Ref {
			t.Errorf("second page of one: %+v of %d, %v; want %+v", page, total, err, ss[1])
		}
		if page, total, err := s.ListSessions(ctx, SessionQuery{User: "PA"}); err != nil || total != 1 || len(page) != 1 || page[0].Principal != "pat" {
			t.Errorf("sessions of users containing PA: %+v of %d, %v", page, total, err)
		}
		if err := s.RevokeSession(ctx, by["pat"].Ref); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Session(ctx, other, "pat"); err != nil || r != nil {
			t.Errorf("pat's session survived its revocation: %v %v", r, err)
		}
		if r, err := s.Session(ctx, mine, "root"); err != nil || r == nil {
			t.Errorf("root's session ended with pat's: %v", err)
		}
		if err := s.RevokeSession(ctx, by["pat"].Ref); errs.Status(err) != 404 {
			t.Errorf("revoke twice: %v", err)
		}
		n, err := db.AuditEvent.Query().Where(auditevent.Rule("anvil:user:manage"), auditevent.TargetID("pat"), auditevent.Result(audit.Allowed)).Count(ctx)
		if err != nil || n != 1 {
			t.Errorf("audit rows of the revocation: %d %v", n, err)
		}
	})
}
