package nodes

import (
	"context"
	"slices"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/roleassignment"
	"github.com/anvilproject/anvil/ent/runbook"
	"github.com/anvilproject/anvil/policies"
)

// Projects are the project names a caller setting a node's owner or lessee
// may pick from: those owning or leasing the nodes the caller may list and,
// for a system caller, those holding roles. Each source is read once and
// bounded by limit, so a large fleet costs one grouped scan, not a list.
func (s *Service) Projects(ctx context.Context, limit int) ([]string, error) {
	q, err := s.scoped(ctx, ListOptions{})
	if err != nil {
		// A caller who may not list nodes gets no suggestions, not an error.
		return nil, nil
	}
	var pairs []struct {
		Owner  string `json:"owner"`
		Lessee string `json:"lessee"`
	}
	if err := q.Limit(limit).GroupBy(node.FieldOwner, node.FieldLessee).Scan(ctx, &pairs); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pairs {
		out = append(out, p.Owner, p.Lessee)
	}
	if p := policies.PrincipalFrom(ctx); p != nil && p.System {
		held, err := s.db.RoleAssignment.Query().Where(roleassignment.ProjectNEQ("")).
			Unique(true).Limit(limit).Select(roleassignment.FieldProject).Strings(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, held...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 0 && out[0] == "" {
		out = out[1:]
	}
	return out, nil
}

// ProjectKnown says whether the caller knows of any node or user in
// project: a name it knows nothing of is most likely misspelt. A caller
// knows its own project, the projects owning or leasing nodes it may list
// and, on the system scope, those holding roles or owning runbooks; the
// same bounds as the suggestions, so the answer tells a tenant nothing of
// projects it could not already see.
func (s *Service) ProjectKnown(ctx context.Context, project string) (bool, error) {
	p := policies.PrincipalFrom(ctx)
	if p != nil && p.Project == project {
		return true, nil
	}
	q, err := s.scoped(ctx, ListOptions{})
	if err != nil {
		return false, nil
	}
	used, err := q.Where(node.Or(node.Owner(project), node.Lessee(project))).Exist(ctx)
	if err != nil || used || p == nil || !p.System {
		return used, err
	}
	if used, err = s.db.RoleAssignment.Query().Where(roleassignment.Project(project)).Exist(ctx); err != nil || used {
		return used, err
	}
	return s.db.Runbook.Query().Where(runbook.Owner(project)).Exist(ctx)
}
