package ramdisk

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"strings"
	"sync"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// A heartbeat's store path is a read and a conditional write, or for an
// agent already known one write, each a statement prepared once per pool
// connection rather than parsed for every heartbeat: parsing cost SQLite
// about a fifth of a heartbeat's CPU. The read takes only the agent keys
// a heartbeat checks, not driver_internal_info whole, which grows with a
// node's steps and would be decoded each time.
type hbStmts struct {
	mu sync.Mutex
	// byUUID and byName read a node's agent keys; update[fastTrack]
	// records a heartbeat after that read and again[fastTrack] without
	// it (the states a heartbeat may be recorded in differ with fast
	// track).
	byUUID, byName *sql.Stmt
	update, again  [2]*sql.Stmt
	group          groupCommit
	// known is what the last heartbeat recorded for each node, by UUID,
	// so that the next one can be one write (see again).
	known map[string]agentKeys
}

// maxKnown bounds known: past it, it starts again empty (each node then
// pays one read more).
const maxKnown = 100_000

// agentKeys is what a heartbeat needs of its node. A key that is absent
// or not a string reads as "" (token, url, verifyCA); hadURL says whether
// agent_url is there at all, whatever its value.
type agentKeys struct {
	id                   int
	uuid, state          string
	token, url, verifyCA string
	// tokenAddr is the address a lookup bound the token to, if any.
	tokenAddr string
	hadURL    bool
}

// readAgent reads the node named by ident (a UUID or a name) for a
// heartbeat; nil when there is none.
func (s *Service) readAgent(ctx context.Context, ident string) (*agentKeys, error) {
	byUUID := nodes.IsUUID(ident)
	if byUUID {
		ident = strings.ToLower(ident)
	}
	st, err := s.hb.read(ctx, s.db, byUUID)
	if err != nil {
		return nil, err
	}
	var k agentKeys
	var tok, url, ca, addr sql.NullString
	err = st.QueryRowContext(ctx, ident).Scan(&k.id, &k.uuid, &k.state, &tok, &url, &ca, &addr, &k.hadURL)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	k.token, k.url, k.verifyCA, k.tokenAddr = tok.String, url.String, ca.String, addr.String
	return &k, nil
}

// recordHeartbeat merges patch (a JSON object) into the node's
// driver_internal_info in one conditional write: only while the node is
// in a state that records heartbeats and its token is still stored. It
// returns the rows changed, 0 when either condition no longer holds.
//
// On SQLite the writes of concurrent heartbeats are committed together
// (group commit): SQLite has one writer at a time, so they would wait
// for each other anyway, each in its own transaction and, past the
// first, in the busy handler's sleeps; one transaction for many spares
// the lock and commit work of all but one. Each write keeps its own
// condition and result.
func (s *Service) recordHeartbeat(ctx context.Context, id int, patch []byte, stored string) (int64, error) {
	st, err := s.hb.write(ctx, s.db, s.FastTrack, false)
	if err != nil {
		return 0, err
	}
	return s.runWrite(ctx, &hbWrite{st: st, args: []any{string(patch), s.now(), id, stored}})
}

// beatAgain records a heartbeat of an agent whose previous heartbeat
// this server recorded, in one write instead of a read and a write: the
// token, callback URL and certificate are checked against what that
// heartbeat left, the token in constant time here, and the write happens
// only if the node still holds exactly those and is in a state that
// records heartbeats. It reports false when it cannot decide (nothing
// known, something differs, or the node changed since), and the caller
// then takes the full path, which reads the node and answers as always.
func (s *Service) beatAgain(ctx context.Context, ident string, hb *Heartbeat, patch []byte) (bool, error) {
	if !nodes.IsUUID(ident) {
		return false, nil
	}
	ident = strings.ToLower(ident)
	s.hb.mu.Lock()
	k, ok := s.hb.known[ident]
	s.hb.mu.Unlock()
	if !ok || k.url != hb.CallbackURL || (hb.AgentVerifyCA != nil && *hb.AgentVerifyCA != k.verifyCA) ||
		subtle.ConstantTimeCompare([]byte(k.token), []byte(*hb.AgentToken)) != 1 {
		return false, nil
	}
	st, err := s.hb.write(ctx, s.db, s.FastTrack, true)
	if err != nil {
		return false, err
	}
	n, err := s.runWrite(ctx, &hbWrite{st: st, args: []any{string(patch), s.now(), k.id, k.token, k.url, k.verifyCA}})
	if err != nil {
		return true, err
	}
	if n == 0 {
		s.forget(ident)
		return false, nil
	}
	return true, nil
}

// remember keeps what a recorded heartbeat left on node k for beatAgain.
func (s *Service) remember(k agentKeys) {
	s.hb.mu.Lock()
	defer s.hb.mu.Unlock()
	if s.hb.known == nil || len(s.hb.known) >= maxKnown {
		s.hb.known = map[string]agentKeys{}
	}
	s.hb.known[k.uuid] = k
}

func (s *Service) forget(uuid string) {
	s.hb.mu.Lock()
	defer s.hb.mu.Unlock()
	delete(s.hb.known, uuid)
}

func (s *Service) runWrite(ctx context.Context, w *hbWrite) (int64, error) {
	if s.db.Dialect == dialect.Postgres {
		return w.run(ctx, nil)
	}
	r := s.hb.group.commit(ctx, s.db, w)
	return r.n, r.err
}

// hbWrite is one heartbeat's conditional write; done carries its result
// when another caller runs it.
type hbWrite struct {
	st   *sql.Stmt
	args []any
	done chan hbResult
}

type hbResult struct {
	n   int64
	err error
	// lead hands the next batch to this write's caller.
	lead bool
}

// run executes the write, alone or in tx, and returns the rows changed.
func (w *hbWrite) run(ctx context.Context, tx *sql.Tx) (int64, error) {
	st := w.st
	if tx != nil {
		st = tx.StmtContext(ctx, st)
	}
	res, err := st.ExecContext(ctx, w.args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// maxGroup bounds one group commit, and so how long its writes hold
// SQLite's write lock against everything else.
const maxGroup = 128

// groupCommit queues writes; the caller whose write finds nobody
// writing leads: it commits what is queued in one transaction, delivers
// each result once committed, and hands the lead to the first write
// queued meanwhile, so that no caller waits for more than the batch
// before its own, and its own.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*hbWrite
	leading bool
}

func (g *groupCommit) commit(ctx context.Context, db *store.DB, w *hbWrite) hbResult {
	w.done = make(chan hbResult, 1)
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if g.leading {
		g.mu.Unlock()
		if r := <-w.done; !r.lead {
			return r
		}
		g.mu.Lock()
	}
	g.leading = true
	n := min(len(g.queue), maxGroup)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	// The batch is everyone's: one caller's cancelled request must not
	// fail the others' writes.
	res := g.write(context.WithoutCancel(ctx), db, batch)

	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- hbResult{lead: true}
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	var mine hbResult
	for i, bw := range batch {
		if bw == w {
			mine = res[i]
		} else {
			bw.done <- res[i]
		}
	}
	return mine
}

// write commits batch in one transaction and returns each write's
// result; if the transaction fails, each write is run alone so that each
// gets its own answer.
func (g *groupCommit) write(ctx context.Context, db *store.DB, batch []*hbWrite) []hbResult {
	res := make([]hbResult, len(batch))
	if len(batch) > 1 {
		if tx, err := db.SQL.BeginTx(ctx, nil); err == nil {
			for i, w := range batch {
				if res[i].n, err = w.run(ctx, tx); err != nil {
					break
				}
			}
			if err == nil && tx.Commit() == nil {
				return res
			}
			tx.Rollback()
		}
	}
	for i, w := range batch {
		res[i].n, res[i].err = w.run(ctx, nil)
	}
	return res
}

func (h *hbStmts) read(ctx context.Context, db *store.DB, byUUID bool) (*sql.Stmt, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slot, col := &h.byName, "name"
	if byUUID {
		slot, col = &h.byUUID, "uuid"
	}
	if *slot == nil {
		// A key's value only when it is a string, as the Go checks
		// before this read took (a type assertion on the decoded map).
		q := `SELECT id, uuid, provision_state,
	CASE WHEN json_type(driver_internal_info, '$.` + KeyToken + `') = 'text' THEN json_extract(driver_internal_info, '$.` + KeyToken + `') END,
	CASE WHEN json_type(driver_internal_info, '$.` + KeyURL + `') = 'text' THEN json_extract(driver_internal_info, '$.` + KeyURL + `') END,
	CASE WHEN json_type(driver_internal_info, '$.` + KeyVerifyCA + `') = 'text' THEN json_extract(driver_internal_info, '$.` + KeyVerifyCA + `') END,
	CASE WHEN json_type(driver_internal_info, '$.` + KeyTokenAddress + `') = 'text' THEN json_extract(driver_internal_info, '$.` + KeyTokenAddress + `') END,
	json_type(driver_internal_info, '$.` + KeyURL + `') IS NOT NULL
	FROM nodes WHERE ` + col + ` = ?`
		if db.Dialect == dialect.Postgres {
			q = `SELECT id, uuid, provision_state,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyToken + `') = 'string' THEN driver_internal_info->>'` + KeyToken + `' END,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyURL + `') = 'string' THEN driver_internal_info->>'` + KeyURL + `' END,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyVerifyCA + `') = 'string' THEN driver_internal_info->>'` + KeyVerifyCA + `' END,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyTokenAddress + `') = 'string' THEN driver_internal_info->>'` + KeyTokenAddress + `' END,
	COALESCE(jsonb_typeof(driver_internal_info) = 'object' AND driver_internal_info ? '` + KeyURL + `', false)
	FROM nodes WHERE ` + col + ` = $1`
		}
		st, err := db.SQL.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		*slot = st
	}
	return *slot, nil
}

func (h *hbStmts) write(ctx context.Context, db *store.DB, fastTrack, again bool) (*sql.Stmt, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slots := &h.update
	if again {
		slots = &h.again
	}
	slot := &slots[0]
	states := HeartbeatStates
	if fastTrack {
		slot = &slots[1]
		states = append(append([]string(nil), states...), FastTrackStates...)
	}
	if *slot == nil {
		// The states are the code's own constants, written into the
		// statement rather than bound on every heartbeat.
		in := make([]string, len(states))
		for i, st := range states {
			in[i] = "'" + strings.ReplaceAll(st, "'", "''") + "'"
		}
		q := `UPDATE nodes SET driver_internal_info = json_patch(` + sqliteObj + `, ?), updated_at = ?
	WHERE id = ? AND provision_state IN (` + strings.Join(in, ", ") + `)
	AND json_extract(driver_internal_info, '$.` + KeyToken + `') = ?`
		if again {
			q += `
	AND json_extract(driver_internal_info, '$.` + KeyURL + `') = ?
	AND COALESCE(CASE WHEN json_type(driver_internal_info, '$.` + KeyVerifyCA + `') = 'text' THEN json_extract(driver_internal_info, '$.` + KeyVerifyCA + `') END, '') = ?`
		}
		if db.Dialect == dialect.Postgres {
			q = `UPDATE nodes SET driver_internal_info = ` + pgObj + ` || $1::jsonb, updated_at = $2
	WHERE id = $3 AND provision_state IN (` + strings.Join(in, ", ") + `)
	AND driver_internal_info->>'` + KeyToken + `' = $4`
			if again {
				q += `
	AND driver_internal_info->>'` + KeyURL + `' = $5
	AND COALESCE(CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyVerifyCA + `') = 'string' THEN driver_internal_info->>'` + KeyVerifyCA + `' END, '') = $6`
			}
		}
		st, err := db.SQL.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		*slot = st
	}
	return *slot, nil
}

// heartbeatPatch is what a heartbeat merges into driver_internal_info: a
// nil field was not sent and is left as stored.
type heartbeatPatch struct {
	URL           string  `json:"agent_url"`
	LastHeartbeat string  `json:"agent_last_heartbeat"`
	Version       *string `json:"agent_version,omitempty"`
	VerifyCA      *string `json:"agent_verify_ca,omitempty"`
	Status        *string `json:"agent_status,omitempty"`
	StatusMessage *string `json:"agent_status_message,omitempty"`
}
