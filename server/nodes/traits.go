package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
)

// Traits lists a node's traits, sorted.
func (s *Service) Traits(ctx context.Context, ident string) ([]string, error) {
	n, err := s.Authorized(ctx, ident, RuleTraitsList)
	if err != nil {
		return nil, err
	}
	ts, err := n.QueryTraits().Select(trait.FieldTrait).Strings(ctx)
	sort.Strings(ts)
	return ts, err
}

// traitsOf loads the traits of a page of nodes, sorted, in one query. The
// ids travel as one parameter (a JSON array for SQLite's json_each, an
// array on PostgreSQL) rather than as ent's IN list of up to a thousand
// placeholders, which the database parses afresh for every page: on a
// detailed page of 1,000 nodes this halves the traits' cost.
func (s *Service) traitsOf(ctx context.Context, ns []*ent.Node) (map[int][]string, error) {
	ids := make([]int64, len(ns))
	for i, n := range ns {
		ids[i] = int64(n.ID)
	}
	var (
		query string
		arg   any
	)
	if s.db.Dialect == dialect.Postgres {
		query, arg = "SELECT node_id, trait FROM traits WHERE node_id = ANY($1) ORDER BY node_id, trait", ids
	} else {
		js, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		query, arg = "SELECT node_id, trait FROM traits WHERE node_id IN (SELECT value FROM json_each(?)) ORDER BY node_id, trait", string(js)
	}
	rows, err := s.db.SQL.QueryContext(ctx, query, arg)
	if err != nil {
		return nil, fmt.Errorf("nodes: loading traits: %w", err)
	}
	defer rows.Close()
	out := make(map[int][]string, len(ns))
	for rows.Next() {
		var (
			id int
			t  string
		)
		if err := rows.Scan(&id, &t); err != nil {
			return nil, fmt.Errorf("nodes: loading traits: %w", err)
		}
		out[id] = append(out[id], t)
	}
	return out, rows.Err()
}

// SetTraits replaces all of a node's traits. A trait given twice is
// set once, as Ironic sets the list's distinct traits.
func (s *Service) SetTraits(ctx context.Context, ident string, traits []string) error {
	n, err := s.Authorized(ctx, ident, RuleTraitsSet)
	if err != nil {
		return err
	}
	distinct, seen := make([]string, 0, len(traits)), make(map[string]bool, len(traits))
	for _, t := range traits {
		if !seen[t] {
			seen[t] = true
			distinct = append(distinct, t)
		}
	}
	traits = distinct
	err = ValidateTraits(traits)
	if err == nil {
		err = s.changeTraits(ctx, n, func(tx *ent.Client) error {
			if _, err := tx.Trait.Delete().Where(trait.NodeID(n.ID)).Exec(ctx); err != nil {
				return err
			}
			bulk := make([]*ent.TraitCreate, len(traits))
			for i, t := range traits {
				bulk[i] = tx.Trait.Create().SetNodeID(n.ID).SetTrait(t)
			}
			return tx.Trait.CreateBulk(bulk...).Exec(ctx)
		})
	}
	s.guard.Done(ctx, RuleTraitsSet, "node", n.UUID, err, map[string]any{"traits": traits})
	return err
}

// AddTrait adds one trait; adding a trait the node has is a no-op.
func (s *Service) AddTrait(ctx context.Context, ident, t string) error {
	n, err := s.Authorized(ctx, ident, RuleTraitsSet)
	if err != nil {
		return err
	}
	err = ValidateTrait(t)
	if err == nil {
		err = s.changeTraits(ctx, n, func(tx *ent.Client) error {
			have, err := tx.Trait.Query().Where(trait.NodeID(n.ID)).Select(trait.FieldTrait).Strings(ctx)
			if err != nil || contains(have, t) {
				return err
			}
			if len(have) >= maxTraits {
				return errs.BadRequest("traits", "node %s already has %d traits, the most allowed", n.UUID, maxTraits)
			}
			return tx.Trait.Create().SetNodeID(n.ID).SetTrait(t).Exec(ctx)
		})
	}
	s.guard.Done(ctx, RuleTraitsSet, "node", n.UUID, err, map[string]any{"add": t})
	return err
}

// RemoveTrait removes one trait, or all when t is empty.
func (s *Service) RemoveTrait(ctx context.Context, ident, t string) error {
	n, err := s.Authorized(ctx, ident, RuleTraitsDelete)
	if err != nil {
		return err
	}
	err = s.changeTraits(ctx, n, func(tx *ent.Client) error {
		q := tx.Trait.Delete().Where(trait.NodeID(n.ID))
		if t != "" {
			q = q.Where(trait.Trait(t))
		}
		cnt, err := q.Exec(ctx)
		if err == nil && cnt == 0 && t != "" {
			return errs.NotFound("Node %s doesn't have a trait %s", n.UUID, t)
		}
		return err
	})
	s.guard.Done(ctx, RuleTraitsDelete, "node", n.UUID, err, map[string]any{"remove": t})
	return err
}

// changeTraits runs fn in a transaction that also bumps updated_at under
// the lock condition, so trait edits never race a conductor's work.
func (s *Service) changeTraits(ctx context.Context, n *ent.Node, fn func(tx *ent.Client) error) error {
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if _, err := LockRow(ctx, tx, n); err != nil {
			return err
		}
		return fn(tx)
	})
}
