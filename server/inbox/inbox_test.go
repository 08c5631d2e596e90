package inbox_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/anvilproject/anvil/ent/notice"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestSendOnce: a keyed notice sent twice (two replicas, a pass after a
// restart) is one notice with one audit row, on both databases; an
// unkeyed one is a new notice each time.
func TestSendOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := inbox.New(db, &guard.Guard{Audit: audit.New(db.Client, slog.Default())})
		n := inbox.Notice{Project: "blue", Kind: inbox.LeaseEnding, Key: "ending:l1", Subject: "Your lease ends within a day"}
		for range 2 {
			if err := s.Send(ctx, db.Client, n); err != nil {
				t.Fatal(err)
			}
		}
		n.Key = ""
		for range 2 {
			if err := s.Send(ctx, db.Client, n); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := db.Notice.Query().Where(notice.Project("blue")).Count(ctx); err != nil || got != 3 {
			t.Errorf("notices: %d (%v), want 3", got, err)
		}
		if got, err := db.AuditEvent.Query().Count(ctx); err != nil || got != 3 {
			t.Errorf("audit rows: %d (%v), want 3", got, err)
		}
	})
}
