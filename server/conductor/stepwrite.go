package conductor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
)

// stepWrite is the write that starts a run's next step, or ends a run
// that succeeded: the node's state, its progress in driver_internal_info,
// the step in clean_step or service_step, and the power state the
// previous step left. Those are most of a run's writes, so a batch sends
// all of its step writes as one UPDATE rather than one each: on
// PostgreSQL every statement is a round trip.
type stepWrite struct {
	id int
	// holder is the conductor whose lock the node must still carry.
	holder string
	state  string
	info   map[string]any
	// kind names the step field: clean or service set theirs, deploy
	// has none.
	kind  string
	step  map[string]any
	power string // "" leaves power_state as it is
	// end ends the run: it clears the target state and the lock, sets
	// provision_updated_at to at, and is not fenced by an abort request
	// (the run is over). A start is.
	end bool
	at  time.Time
}

// writeSteps applies the batch's step writes in one UPDATE, fenced as
// each would be alone: the node must still be locked by the write's
// conductor and, for a start, carry no abort request. It returns the
// ids it updated; a write missing from them was fenced.
func writeSteps(ctx context.Context, tx *ent.Client, dia string, writes []*stepWrite) (map[int]bool, error) {
	pg := dia == dialect.Postgres
	var (
		sb   strings.Builder
		args []any
	)
	arg := func(v any, cast string) string {
		args = append(args, v)
		if pg {
			return fmt.Sprintf("$%d::%s", len(args), cast)
		}
		return "?"
	}
	for i, w := range writes {
		info, err := json.Marshal(w.info)
		if err != nil {
			return nil, err
		}
		step, err := json.Marshal(w.step)
		if err != nil {
			return nil, err
		}
		var power, at any
		if w.power != "" {
			power = w.power
		}
		if w.end {
			at = w.at
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		// SQLite binds JSON as the blob ent itself writes; PostgreSQL
		// casts the text to jsonb.
		var infoArg, stepArg any = info, step
		if pg {
			infoArg, stepArg = string(info), string(step)
		}
		fmt.Fprintf(&sb, "(%s, %s, %s, %s, %s, %s, %s, %s, %s)", arg(w.id, "bigint"), arg(w.holder, "text"), arg(w.state, "text"),
			arg(infoArg, "jsonb"), arg(w.kind, "text"), arg(stepArg, "jsonb"), arg(power, "text"), arg(w.end, "boolean"), arg(at, "timestamptz"))
	}
	// SQLite names a VALUES list's columns column1, column2, …; a
	// PostgreSQL alias names them the same way, so one statement serves
	// both.
	alias, notAborted := "v", "JSON_TYPE(nodes.driver_internal_info, '$."+abortRequestedField+"') IS NULL"
	if pg {
		alias = "v(column1, column2, column3, column4, column5, column6, column7, column8, column9)"
		notAborted = "nodes.driver_internal_info -> '" + abortRequestedField + "' IS NULL"
	}
	query := `UPDATE nodes SET provision_state = v.column3, driver_internal_info = v.column4,
	clean_step = CASE WHEN v.column5 = 'clean' THEN v.column6 ELSE nodes.clean_step END,
	service_step = CASE WHEN v.column5 = 'service' THEN v.column6 ELSE nodes.service_step END,
	power_state = COALESCE(v.column7, nodes.power_state),
	target_provision_state = CASE WHEN v.column8 THEN NULL ELSE nodes.target_provision_state END,
	provision_updated_at = COALESCE(v.column9, nodes.provision_updated_at),
	reservation = CASE WHEN v.column8 THEN NULL ELSE nodes.reservation END
FROM (VALUES ` + sb.String() + `) AS ` + alias + `
WHERE nodes.id = v.column1 AND nodes.reservation = v.column2 AND (v.column8 OR ` + notAborted + `)
RETURNING nodes.id`
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("writing steps: %w", err)
	}
	defer rows.Close()
	done := make(map[int]bool, len(writes))
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		done[id] = true
	}
	return done, rows.Err()
}
