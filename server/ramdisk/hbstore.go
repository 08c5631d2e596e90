package ramdisk

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// A heartbeat's store path is two statements, prepared once per pool
// connection rather than parsed for every heartbeat: parsing them cost
// SQLite about a fifth of a heartbeat's CPU. The read takes only the
// agent keys a heartbeat checks, not driver_internal_info whole, which
// grows with a node's steps and would be decoded each time.
type hbStmts struct {
	mu sync.Mutex
	// byUUID and byName read a node's agent keys; update[fastTrack]
	// records a heartbeat (the states it may be recorded in differ).
	byUUID, byName *sql.Stmt
	update         [2]*sql.Stmt
}

// agentKeys is what a heartbeat needs of its node. A key that is absent
// or not a string reads as "" (token, url, verifyCA); hadURL says whether
// agent_url is there at all, whatever its value.
type agentKeys struct {
	id                   int
	uuid, state          string
	token, url, verifyCA string
	hadURL               bool
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
	var tok, url, ca sql.NullString
	err = st.QueryRowContext(ctx, ident).Scan(&k.id, &k.uuid, &k.state, &tok, &url, &ca, &k.hadURL)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	k.token, k.url, k.verifyCA = tok.String, url.String, ca.String
	return &k, nil
}

// recordHeartbeat merges patch (a JSON object) into the node's
// driver_internal_info in one conditional write: only while the node is
// in one of states and its token is still stored. It returns the rows
// changed, 0 when either condition no longer holds.
func (s *Service) recordHeartbeat(ctx context.Context, id int, patch []byte, stored string) (int64, error) {
	st, err := s.hb.write(ctx, s.db, s.FastTrack)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, string(patch), s.now(), id, stored)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
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
	json_type(driver_internal_info, '$.` + KeyURL + `') IS NOT NULL
	FROM nodes WHERE ` + col + ` = ?`
		if db.Dialect == dialect.Postgres {
			q = `SELECT id, uuid, provision_state,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyToken + `') = 'string' THEN driver_internal_info->>'` + KeyToken + `' END,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyURL + `') = 'string' THEN driver_internal_info->>'` + KeyURL + `' END,
	CASE WHEN jsonb_typeof(driver_internal_info->'` + KeyVerifyCA + `') = 'string' THEN driver_internal_info->>'` + KeyVerifyCA + `' END,
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

func (h *hbStmts) write(ctx context.Context, db *store.DB, fastTrack bool) (*sql.Stmt, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slot := &h.update[0]
	states := HeartbeatStates
	if fastTrack {
		slot = &h.update[1]
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
		if db.Dialect == dialect.Postgres {
			q = `UPDATE nodes SET driver_internal_info = ` + pgObj + ` || $1::jsonb, updated_at = $2
	WHERE id = $3 AND provision_state IN (` + strings.Join(in, ", ") + `)
	AND driver_internal_info->>'` + KeyToken + `' = $4`
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
