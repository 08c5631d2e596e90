package conductor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
)

// stepStart is the write that starts a run's next step: the node's state,
// its progress in driver_internal_info, the step in clean_step or
// service_step, and the power state the previous step left. It is most
// of a run's writes, so a batch sends all of its step starts as one
// UPDATE rather than one each: on PostgreSQL every statement is a round
// trip, and they were two thirds of a cleaning batch's.
type stepStart struct {
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
}

// startSteps applies the batch's step starts in one UPDATE, fenced as
// each would be alone: the node must still be locked by the start's
// conductor and carry no abort request. It returns the ids it updated;
// a start missing from them was fenced.
func startSteps(ctx context.Context, tx *ent.Client, dia string, starts []*stepStart) (map[int]bool, error) {
	var (
		sb   strings.Builder
		args []any
	)
	arg := func(v any, cast string) string {
		args = append(args, v)
		if dia == dialect.Postgres {
			return fmt.Sprintf("$%d%s", len(args), cast)
		}
		return "?"
	}
	var jsonCast, idCast, textCast string
	if dia == dialect.Postgres {
		jsonCast, idCast, textCast = "::jsonb", "::bigint", "::text"
	}
	for i, s := range starts {
		info, err := json.Marshal(s.info)
		if err != nil {
			return nil, err
		}
		step, err := json.Marshal(s.step)
		if err != nil {
			return nil, err
		}
		var power any
		if s.power != "" {
			power = s.power
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		// SQLite binds JSON as the blob ent itself writes; PostgreSQL
		// casts the text to jsonb.
		var infoArg, stepArg any = info, step
		if dia == dialect.Postgres {
			infoArg, stepArg = string(info), string(step)
		}
		fmt.Fprintf(&sb, "(%s, %s, %s, %s, %s, %s, %s)", arg(s.id, idCast), arg(s.holder, textCast), arg(s.state, textCast),
			arg(infoArg, jsonCast), arg(s.kind, textCast), arg(stepArg, jsonCast), arg(power, textCast))
	}
	// SQLite names a VALUES list's columns column1, column2, …; a
	// PostgreSQL alias names them the same way, so one statement serves
	// both.
	alias, notAborted := "v", "JSON_TYPE(nodes.driver_internal_info, '$."+abortRequestedField+"') IS NULL"
	if dia == dialect.Postgres {
		alias = "v(column1, column2, column3, column4, column5, column6, column7)"
		notAborted = "nodes.driver_internal_info -> '" + abortRequestedField + "' IS NULL"
	}
	query := `UPDATE nodes SET provision_state = v.column3, driver_internal_info = v.column4,
	clean_step = CASE WHEN v.column5 = 'clean' THEN v.column6 ELSE nodes.clean_step END,
	service_step = CASE WHEN v.column5 = 'service' THEN v.column6 ELSE nodes.service_step END,
	power_state = COALESCE(v.column7, nodes.power_state)
FROM (VALUES ` + sb.String() + `) AS ` + alias + `
WHERE nodes.id = v.column1 AND nodes.reservation = v.column2 AND ` + notAborted + `
RETURNING nodes.id`
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("starting steps: %w", err)
	}
	defer rows.Close()
	done := make(map[int]bool, len(starts))
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		done[id] = true
	}
	return done, rows.Err()
}
