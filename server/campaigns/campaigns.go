// Package campaigns rolls one runbook over many nodes (issue #29): at most
// max_concurrency of them at once across every conductor, stopping new
// starts once the failure budget is spent, each node authorized as its
// creator both when the campaign is created and when the node's turn
// comes. It is an Anvil extension of the API; Ironic has no campaigns.
package campaigns

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/campaign"
	"github.com/anvilproject/anvil/ent/campaignapproval"
	"github.com/anvilproject/anvil/ent/campaignnode"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, in Ironic's naming though Ironic has no campaigns.
const (
	RuleGet     = "baremetal:campaign:get"
	RuleCreate  = "baremetal:campaign:create"
	RuleUpdate  = "baremetal:campaign:update"
	RuleApprove = "baremetal:campaign:approve"
	// RuleApproveOwn lets a campaign's creator approve it too (nobody by
	// default: approval is another person's look).
	RuleApproveOwn = "baremetal:campaign:approve:own"
	RuleDelete     = "baremetal:campaign:delete"
	// RuleOwnerApproval, checked with a node's owner as the target, says
	// whether that owner wants to approve campaigns its lessees roll over
	// its nodes.
	RuleOwnerApproval = "baremetal:campaign:owner_approval"
)

// Events the conductors record in the audit log, under these rules.
const (
	EventStart         = "anvil:campaign:start"
	EventBatch         = "anvil:campaign:batch"
	EventFailureBudget = "anvil:campaign:failure_budget"
	EventFinish        = "anvil:campaign:finish"
)

// Campaign states.
const (
	StatePendingApproval = "pending_approval"
	StateScheduled       = "scheduled"
	StateRunning         = "running"
	StatePaused          = "paused"
	StateCompleted       = "completed"
	StateFailed          = "failed"
	StateCancelled       = "cancelled"
)

// States are every campaign state, for those who count by state.
var States = []string{StatePendingApproval, StateScheduled, StateRunning, StatePaused, StateCompleted, StateFailed, StateCancelled}

// Node statuses.
const (
	NodePending   = "pending"
	NodeRunning   = "running"
	NodeSucceeded = "succeeded"
	NodeFailed    = "failed"
	NodeSkipped   = "skipped"
)

// Limits on a request.
const (
	MaxConcurrency = 1000
	// MaxNodes bounds one request's node list and query result, so a
	// campaign is created in one transaction of bounded size.
	MaxNodes = 10000
	// MaxBatchPause bounds batch_pause (seconds): a day.
	MaxBatchPause = 86400
)

// finished are the states a campaign never leaves.
var finished = []string{StateCompleted, StateFailed, StateCancelled}

// Service serves campaign operations for the principal in the context;
// Process is the conductors' side.
type Service struct {
	db       *store.DB
	guard    *guard.Guard
	nodes    *nodes.Service
	runbooks *runbooks.Service
	ops      *conductor.Ops
	wake     chan struct{}
	clock    atomic.Pointer[func() time.Time]
	// Metrics counts the nodes' outcomes; nil counts none.
	Metrics *Metrics
}

// New returns the campaign service. ops starts each node's run, as the
// API's provision with a runbook does.
func New(db *store.DB, g *guard.Guard, ns *nodes.Service, rs *runbooks.Service, ops *conductor.Ops) *Service {
	return &Service{db: db, guard: g, nodes: ns, runbooks: rs, ops: ops, wake: make(chan struct{}, 1)}
}

// SetClock makes the service read the time from now instead of the
// wall clock for what the campaign's settings decide (start_after, the
// window, batch pauses), so tests can move time without waiting for it.
func (s *Service) SetClock(now func() time.Time) { s.clock.Store(&now) }

func (s *Service) now() time.Time {
	if f := s.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// Wake is signalled when a campaign of this process may start nodes now
// (created, approved, resumed), so the conductor does not wait for its
// next pass.
func (s *Service) Wake() <-chan struct{} { return s.wake }

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Target is the policy target for a campaign.
func Target(c *ent.Campaign) policies.Target {
	t := policies.Target{}
	if c.Owner != nil {
		t.CampaignOwner = *c.Owner
	}
	return t
}

func notFound(ident string) error { return errs.NotFound("Campaign %s could not be found.", ident) }

// find returns the campaign (by UUID) the caller may see, else a 404: a
// hidden campaign and a missing one look the same.
func (s *Service) find(ctx context.Context, ident string) (*ent.Campaign, error) {
	if !nodes.IsUUID(ident) {
		return nil, notFound(ident)
	}
	c, err := s.db.Campaign.Query().Where(campaign.UUID(strings.ToLower(ident))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	if err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, RuleGet, Target(c)) && !s.approverSees(ctx, c) {
		return nil, notFound(ident)
	}
	return c, nil
}

// approverSees says whether the caller reads for a node owner whose
// approval the campaign asked for: they see it, to decide and to follow
// what runs on their nodes.
func (s *Service) approverSees(ctx context.Context, c *ent.Campaign) bool {
	p := policies.PrincipalFrom(ctx)
	if p == nil || p.Project == "" {
		return false
	}
	ok, err := c.QueryApprovals().Where(campaignapproval.Project(p.Project)).Exist(ctx)
	return err == nil && ok && s.guard.Allowed(ctx, RuleGet, policies.Target{NodeOwner: p.Project})
}

// authorized finds a campaign the caller may see (404) and checks rule
// on it (403).
func (s *Service) authorized(ctx context.Context, ident, rule string) (*ent.Campaign, error) {
	c, err := s.find(ctx, ident)
	if err != nil {
		return nil, err
	}
	if err := s.guard.Authorize(ctx, rule, "campaign", c.UUID, Target(c)); err != nil {
		return nil, err
	}
	return c, nil
}

// Authorize finds a campaign (404) and checks rule on it (403), so a
// handler can refuse a caller before it reads the body.
func (s *Service) Authorize(ctx context.Context, ident, rule string) error {
	_, err := s.authorized(ctx, ident, rule)
	return err
}

// callerTarget is the target of a campaign the caller would own.
func callerTarget(ctx context.Context) policies.Target {
	if p := policies.PrincipalFrom(ctx); p != nil && !p.System {
		return policies.Target{CampaignOwner: p.Project}
	}
	return policies.Target{}
}

// MayCreate says whether the caller may create a campaign of its own,
// for showing the buttons that would; it records nothing.
func (s *Service) MayCreate(ctx context.Context) bool {
	return s.guard.Allowed(ctx, RuleCreate, callerTarget(ctx))
}

// AuthorizeCreate checks the caller may create a campaign of its own
// (its project's, or the system's) before the body is read.
func (s *Service) AuthorizeCreate(ctx context.Context) error {
	return s.guard.Authorize(ctx, RuleCreate, "campaign", "", callerTarget(ctx))
}

// Counts are a campaign's nodes by status.
type Counts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
}

// View is a campaign as the API shows it.
type View struct {
	*ent.Campaign
	Counts Counts
	// Approvals are the node owners' approvals the campaign asked for.
	Approvals []*ent.CampaignApproval
}

func (s *Service) counts(ctx context.Context, ids []int) (map[int]*Counts, error) {
	var rows []struct {
		CampaignID int    `json:"campaign_id"`
		Status     string `json:"status"`
		Count      int    `json:"count"`
	}
	err := s.db.CampaignNode.Query().Where(campaignnode.CampaignIDIn(ids...)).
		GroupBy(campaignnode.FieldCampaignID, campaignnode.FieldStatus).Aggregate(ent.Count()).Scan(ctx, &rows)
	if err != nil {
		return nil, err
	}
	out := map[int]*Counts{}
	for _, id := range ids {
		out[id] = &Counts{}
	}
	for _, r := range rows {
		c := out[r.CampaignID]
		switch r.Status {
		case NodePending:
			c.Pending = r.Count
		case NodeRunning:
			c.Running = r.Count
		case NodeSucceeded:
			c.Succeeded = r.Count
		case NodeFailed:
			c.Failed = r.Count
		case NodeSkipped:
			c.Skipped = r.Count
		}
	}
	return out, nil
}

func (s *Service) views(ctx context.Context, cs []*ent.Campaign) ([]*View, error) {
	ids := make([]int, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	counts, err := s.counts(ctx, ids)
	if err != nil {
		return nil, err
	}
	approvals, err := s.db.CampaignApproval.Query().Where(campaignapproval.CampaignIDIn(ids...)).
		Order(ent.Asc(campaignapproval.FieldProject)).All(ctx)
	if err != nil {
		return nil, err
	}
	by := map[int][]*ent.CampaignApproval{}
	for _, a := range approvals {
		by[a.CampaignID] = append(by[a.CampaignID], a)
	}
	out := make([]*View, len(cs))
	for i, c := range cs {
		out[i] = &View{Campaign: c, Counts: *counts[c.ID], Approvals: by[c.ID]}
	}
	return out, nil
}

// Get returns one campaign with its counts.
func (s *Service) Get(ctx context.Context, ident string) (*View, error) {
	c, err := s.find(ctx, ident)
	if err != nil {
		return nil, err
	}
	vs, err := s.views(ctx, []*ent.Campaign{c})
	if err != nil {
		return nil, err
	}
	return vs[0], nil
}

// List returns the campaigns the caller may see, newest first: every
// campaign for a system reader, a project's own otherwise, as runbooks
// are scoped.
func (s *Service) List(ctx context.Context) ([]*View, error) {
	t := callerTarget(ctx)
	if err := s.guard.Authorize(ctx, RuleGet, "campaign", "", t); err != nil {
		return nil, err
	}
	q := s.db.Campaign.Query().Order(ent.Desc(campaign.FieldID))
	if p := policies.PrincipalFrom(ctx); p == nil || !p.System {
		own := campaign.Owner(t.CampaignOwner)
		if p != nil && p.Project != "" && s.guard.Allowed(ctx, RuleGet, policies.Target{NodeOwner: p.Project}) {
			// A node owner also lists the campaigns that asked for its
			// approval.
			own = campaign.Or(own, campaign.HasApprovalsWith(campaignapproval.Project(p.Project)))
		}
		q = q.Where(own)
	}
	cs, err := q.All(ctx)
	if err != nil {
		return nil, err
	}
	return s.views(ctx, cs)
}

// Nodes returns a campaign's nodes in the order they were given.
func (s *Service) Nodes(ctx context.Context, ident string) ([]*ent.CampaignNode, error) {
	c, err := s.find(ctx, ident)
	if err != nil {
		return nil, err
	}
	return c.QueryNodes().Order(ent.Asc(campaignnode.FieldPosition)).All(ctx)
}

// NodeQuery picks a campaign's nodes by the node list's filters; the
// caller's visibility applies as it does to the list.
type NodeQuery struct {
	Owner          *string  `json:"owner"`
	Lessee         *string  `json:"lessee"`
	ResourceClass  *string  `json:"resource_class"`
	ConductorGroup *string  `json:"conductor_group"`
	ProvisionState *string  `json:"provision_state"`
	Traits         []string `json:"traits"` // every one of them
}

// Input is a campaign creation request.
type Input struct {
	Name           string     `json:"name"`
	Runbook        string     `json:"runbook"`
	Nodes          []string   `json:"nodes"`
	NodeQuery      *NodeQuery `json:"node_query"`
	MaxConcurrency *int       `json:"max_concurrency"`
	// MaxFailures is a count ("3" or 3) or a share of the nodes ("10%").
	MaxFailures any     `json:"max_failures"`
	StartAfter  *string `json:"start_after"`
	Window      *Window `json:"window"`
	// BatchPause (seconds) runs the campaign in batches of
	// max_concurrency nodes with this pause between them.
	BatchPause       *int `json:"batch_pause"`
	RequiresApproval bool `json:"requires_approval"`
	// SkipIneligible records ineligible nodes as skipped, with their
	// reason, instead of refusing the request.
	SkipIneligible bool `json:"skip_ineligible"`
}

// budget reads max_failures: a count, or a percentage of the nodes.
func budget(v any) (count int, percent *int, err error) {
	bad := errs.BadRequest("max_failures", "max_failures must be a count (\"3\") or a percentage of the nodes (\"10%%\"), not %v", v)
	var raw string
	switch x := v.(type) {
	case nil:
		return 0, nil, nil
	case float64:
		if x != math.Trunc(x) {
			return 0, nil, bad
		}
		raw = strconv.FormatFloat(x, 'f', 0, 64)
	case string:
		raw = strings.TrimSpace(x)
	default:
		return 0, nil, bad
	}
	num, pct := strings.CutSuffix(raw, "%")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || (pct && n > 100) || n > MaxNodes {
		return 0, nil, bad
	}
	if pct {
		return 0, &n, nil
	}
	return n, nil, nil
}

// validate checks everything about a request that needs no lookup.
func validate(in *Input) (startAfter *time.Time, err error) {
	if in.Name == "" || utf8.RuneCountInString(in.Name) > 255 {
		return nil, errs.BadRequest("name", "name is required, at most 255 characters")
	}
	if in.Runbook == "" {
		return nil, errs.BadRequest("runbook", "runbook (a runbook's name or UUID) is required")
	}
	switch {
	case len(in.Nodes) > 0 && in.NodeQuery != nil:
		return nil, errs.BadRequest("nodes", "give nodes or node_query, not both")
	case len(in.Nodes) == 0 && in.NodeQuery == nil:
		return nil, errs.BadRequest("nodes", "nodes (UUIDs or names) or node_query is required")
	case len(in.Nodes) > MaxNodes:
		return nil, errs.BadRequest("nodes", "a campaign takes at most %d nodes", MaxNodes)
	}
	seen := map[string]bool{}
	for _, n := range in.Nodes {
		if n == "" {
			return nil, errs.BadRequest("nodes", "nodes holds an empty name")
		}
		if seen[n] {
			return nil, errs.BadRequest("nodes", "nodes names %s twice", n)
		}
		seen[n] = true
	}
	if in.NodeQuery != nil {
		if err := nodes.ValidateTraits(in.NodeQuery.Traits); err != nil {
			return nil, errs.BadRequest("node_query", "node_query.traits: %v", err)
		}
	}
	if in.MaxConcurrency != nil && (*in.MaxConcurrency < 1 || *in.MaxConcurrency > MaxConcurrency) {
		return nil, errs.BadRequest("max_concurrency", "max_concurrency must be from 1 to %d", MaxConcurrency)
	}
	if _, _, err := budget(in.MaxFailures); err != nil {
		return nil, err
	}
	if in.StartAfter != nil {
		t, err := time.Parse(time.RFC3339, *in.StartAfter)
		if err != nil {
			return nil, errs.BadRequest("start_after", "start_after must be an RFC 3339 time (2026-01-02T15:04:05Z), not %q", *in.StartAfter)
		}
		startAfter = &t
	}
	if in.Window != nil {
		if err := in.Window.validate(); err != nil {
			return nil, err
		}
	}
	if in.BatchPause != nil && (*in.BatchPause < 0 || *in.BatchPause > MaxBatchPause) {
		return nil, errs.BadRequest("batch_pause", "batch_pause must be from 0 to %d seconds", MaxBatchPause)
	}
	return startAfter, nil
}

// candidate is a node a request names, with why it cannot take part ("" if
// it can).
type candidate struct {
	node   *ent.Node
	ident  string
	reason string
}

// resolve turns the request's nodes into candidates: a node the caller
// cannot see is a 404 naming it, as the node API answers.
func (s *Service) resolve(ctx context.Context, in *Input) ([]candidate, error) {
	var out []candidate
	if in.NodeQuery == nil {
		seen := map[int]bool{}
		for _, ident := range in.Nodes {
			n, err := s.nodes.Authorized(ctx, ident, nodes.RuleGet)
			if err != nil {
				return nil, err
			}
			if seen[n.ID] {
				return nil, errs.BadRequest("nodes", "nodes names %s twice (by name and UUID)", ident)
			}
			seen[n.ID] = true
			out = append(out, candidate{node: n, ident: ident})
		}
		return out, nil
	}
	q := in.NodeQuery
	o := nodes.ListOptions{Owner: q.Owner, Lessee: q.Lessee, ResourceClass: q.ResourceClass, ConductorGroup: q.ConductorGroup,
		ProvisionState: q.ProvisionState, WithTraits: true, Limit: nodes.MaxLimit}
	if len(q.Traits) > 0 {
		o.Trait = &q.Traits[0]
	}
	for {
		page, err := s.nodes.List(ctx, o)
		if err != nil {
			return nil, err
		}
		for _, v := range page.Nodes {
			if hasAll(v.Traits, q.Traits) {
				out = append(out, candidate{node: v.Node, ident: v.UUID})
			}
		}
		if len(out) > MaxNodes {
			return nil, errs.BadRequest("node_query", "node_query matches more than %d nodes", MaxNodes)
		}
		if !page.More || len(page.Nodes) == 0 {
			break
		}
		o.Marker = page.Nodes[len(page.Nodes)-1].UUID
	}
	if len(out) == 0 {
		return nil, errs.BadRequest("node_query", "node_query matches no node you may see")
	}
	return out, nil
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// traitsOf reads the traits of every candidate in one query per
// thousand nodes, rather than one per node.
func (s *Service) traitsOf(ctx context.Context, cands []candidate) (map[int][]string, error) {
	out := map[int][]string{}
	for i := 0; i < len(cands); i += 1000 {
		ids := make([]int, 0, 1000)
		for _, cd := range cands[i:min(i+1000, len(cands))] {
			ids = append(ids, cd.node.ID)
		}
		var rows []struct {
			NodeID int    `json:"node_id"`
			Trait  string `json:"trait"`
		}
		if err := s.db.Trait.Query().Where(trait.NodeIDIn(ids...)).Select(trait.FieldNodeID, trait.FieldTrait).Scan(ctx, &rows); err != nil {
			return nil, err
		}
		for _, r := range rows {
			out[r.NodeID] = append(out[r.NodeID], r.Trait)
		}
	}
	return out, nil
}

// eligibility records in each candidate why the caller may not run rb on
// it now ("" if it may). The runbook is resolved once per campaign, on
// the first node that accepts it: its visibility, use rule, steps and
// step rules are the runbook's and the caller's, not the node's. Per node
// only the node's own checks run (maintenance, state, the provision rule,
// whether it takes the runbook and the trait gate), with the traits of
// all of them read together. A refusal of the runbook itself refuses
// the request.
func (s *Service) eligibility(ctx context.Context, rb *ent.Runbook, cands []candidate) error {
	traits, err := s.traitsOf(ctx, cands)
	if err != nil {
		return err
	}
	resolved := false
	for i := range cands {
		n := cands[i].node
		switch {
		case n.Maintenance:
			cands[i].reason = "the node is in maintenance"
		case n.ProvisionState != nodes.StateManageable && n.ProvisionState != nodes.StateActive:
			cands[i].reason = fmt.Sprintf("runbooks run on manageable or active nodes; this node is %s", n.ProvisionState)
		case !s.guard.Allowed(ctx, conductor.RuleProvisionRunbook, nodes.Target(n)):
			cands[i].reason = "you may not run runbooks on this node (policy " + conductor.RuleProvisionRunbook + ")"
		default:
			if err := runbooks.Accepts(rb, n, traits[n.ID]); err != nil {
				cands[i].reason = err.Error()
				continue
			}
			if !resolved {
				if _, err := s.runbooks.Resolve(ctx, rb.UUID, n, traits[n.ID]); err != nil {
					return err
				}
				resolved = true
			}
		}
	}
	return nil
}

// ownerApprovals names the owners of the eligible nodes whose approval a
// project's campaign needs: those it does not own, where the owner's
// policy (baremetal:campaign:owner_approval, with the node as target)
// asks for it. A system campaign needs none.
func (s *Service) ownerApprovals(ctx context.Context, cands []candidate) []string {
	p := policies.PrincipalFrom(ctx)
	if p == nil || p.System || p.Project == "" {
		return nil
	}
	var out []string
	for _, cd := range cands {
		n := cd.node
		if cd.reason != "" || n.Owner == "" || n.Owner == p.Project || slices.Contains(out, n.Owner) {
			continue
		}
		if s.guard.Allowed(ctx, RuleOwnerApproval, nodes.Target(n)) {
			out = append(out, n.Owner)
		}
	}
	slices.Sort(out)
	return out
}

// Create checks the caller's right to run the runbook on every node and
// records the campaign with one row per node.
func (s *Service) Create(ctx context.Context, in *Input) (*View, error) {
	return s.create(ctx, in, "")
}

func (s *Service) create(ctx context.Context, in *Input, retryOf string) (v *View, err error) {
	t := callerTarget(ctx)
	if err := s.guard.Authorize(ctx, RuleCreate, "campaign", "", t); err != nil {
		return nil, err
	}
	startAfter, err := validate(in)
	if err != nil {
		return nil, err
	}
	rb, err := s.runbooks.Get(ctx, in.Runbook)
	if err != nil {
		return nil, err
	}
	if err := s.runbooks.Authorize(ctx, rb.UUID, runbooks.RuleUse); err != nil {
		return nil, err
	}
	cands, err := s.resolve(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := s.eligibility(ctx, rb.Runbook, cands); err != nil {
		return nil, err
	}
	var bad []string
	eligible := 0
	for _, cd := range cands {
		if cd.reason != "" {
			bad = append(bad, cd.ident+": "+cd.reason)
		} else {
			eligible++
		}
	}
	if len(bad) > 0 && !in.SkipIneligible {
		return nil, errs.BadRequest("nodes", "%d node(s) may not take runbook %s (or set skip_ineligible): %s", len(bad), rb.Name, strings.Join(bad, "; "))
	}
	if eligible == 0 {
		return nil, errs.BadRequest("nodes", "no node may take runbook %s: %s", rb.Name, strings.Join(bad, "; "))
	}
	owners := s.ownerApprovals(ctx, cands)
	maxFail, pct, _ := budget(in.MaxFailures)
	if pct != nil {
		maxFail = eligible * *pct / 100
	}
	conc := 1
	if in.MaxConcurrency != nil {
		conc = *in.MaxConcurrency
	}
	pause := 0
	if in.BatchPause != nil {
		pause = *in.BatchPause
	}
	p := policies.PrincipalFrom(ctx)
	now := s.now()
	state := StateRunning
	switch {
	case in.RequiresApproval || len(owners) > 0:
		state = StatePendingApproval
	case startAfter != nil && startAfter.After(now):
		state = StateScheduled
	}
	id := uuid.NewString()
	defer func() {
		detail := map[string]any{"name": in.Name, "runbook": rb.UUID, "nodes": len(cands), "skipped": len(bad),
			"max_concurrency": conc, "max_failures": maxFail, "state": state}
		if len(owners) > 0 {
			detail["owner_approval"] = owners
		}
		if retryOf != "" {
			detail["retry_of"] = retryOf
		}
		s.guard.Done(ctx, RuleCreate, "campaign", id, err, detail)
	}()
	var c *ent.Campaign
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cr := tx.Campaign.Create().SetUUID(id).SetName(in.Name).SetRunbook(rb.UUID).SetRunbookName(rb.Name).
			SetCreatedBy(actor(p)).SetPrincipal(principalMap(p)).SetState(state).SetMaxConcurrency(conc).
			SetMaxFailures(maxFail).SetNillableMaxFailuresPercent(pct).SetNillableStartAfter(startAfter).
			SetRequiresApproval(in.RequiresApproval).SetBatchPause(pause)
		if t.CampaignOwner != "" {
			cr.SetOwner(t.CampaignOwner)
		}
		if w := in.Window; w != nil {
			cr.SetWindowDays(w.Days).SetWindowFrom(w.From).SetWindowTo(w.To).SetWindowTimezone(w.Timezone)
		}
		if retryOf != "" {
			cr.SetRetryOf(retryOf)
		}
		if state == StateRunning {
			cr.SetStartedAt(now)
		}
		var err error
		if c, err = cr.Save(ctx); err != nil {
			return err
		}
		for _, o := range owners {
			if err := tx.CampaignApproval.Create().SetCampaignID(c.ID).SetProject(o).Exec(ctx); err != nil {
				return err
			}
		}
		rows := make([]*ent.CampaignNodeCreate, len(cands))
		for i, cd := range cands {
			r := tx.CampaignNode.Create().SetCampaignID(c.ID).SetNodeUUID(cd.node.UUID).SetPosition(i).SetStatus(NodePending)
			if cd.reason != "" {
				r.SetStatus(NodeSkipped).SetReason(cd.reason).SetFinishedAt(now)
			}
			rows[i] = r
		}
		// Batches keep each INSERT under the databases' bound-parameter limits.
		for i := 0; i < len(rows); i += 500 {
			if err := tx.CampaignNode.CreateBulk(rows[i:min(i+500, len(rows))]...).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.Metrics.count(NodeSkipped, len(bad))
	// The answer shows the campaign as created, before this replica's
	// conductor is woken to start its nodes.
	vs, err := s.views(ctx, []*ent.Campaign{c})
	if err != nil {
		return nil, err
	}
	s.poke()
	return vs[0], nil
}

// RetryInput names the campaign a retry creates; by default the old
// one's name with "(retry)".
type RetryInput struct {
	Name           string `json:"name"`
	SkipIneligible bool   `json:"skip_ineligible"`
}

// Retry creates, as the caller, a new campaign over ident's failed nodes
// with its runbook and settings (not its start_after, which has passed).
// Each node is checked again as for any campaign: one its failure left
// in maintenance (or clean failed) must be recovered first, or skipped
// with skip_ineligible.
func (s *Service) Retry(ctx context.Context, ident string, in *RetryInput) (*View, error) {
	c, err := s.find(ctx, ident)
	if err != nil {
		return nil, err
	}
	if err := s.AuthorizeCreate(ctx); err != nil {
		return nil, err
	}
	failed, err := c.QueryNodes().Where(campaignnode.Status(NodeFailed)).Order(ent.Asc(campaignnode.FieldPosition)).
		Select(campaignnode.FieldNodeUUID).Strings(ctx)
	if err != nil {
		return nil, err
	}
	if len(failed) == 0 {
		return nil, errs.Conflict("Campaign %s has no failed node to retry.", c.UUID)
	}
	name := in.Name
	if name == "" {
		name = c.Name
		if r := []rune(name); len(r) > 247 {
			name = string(r[:247])
		}
		name += " (retry)"
	}
	conc := c.MaxConcurrency
	var maxFail any = float64(c.MaxFailures)
	if c.MaxFailuresPercent != nil {
		maxFail = strconv.Itoa(*c.MaxFailuresPercent) + "%"
	}
	retry := &Input{Name: name, Runbook: c.Runbook, Nodes: failed, MaxConcurrency: &conc, MaxFailures: maxFail,
		Window: WindowOf(c), BatchPause: &c.BatchPause, RequiresApproval: c.RequiresApproval, SkipIneligible: in.SkipIneligible}
	return s.create(ctx, retry, c.UUID)
}

// ApproveOwn refuses the creator of c its approval unless
// RuleApproveOwn lets them (audited), saying who approves instead.
func (s *Service) ApproveOwn(ctx context.Context, c *ent.Campaign) error {
	if who := actor(policies.PrincipalFrom(ctx)); who == "" || who != c.CreatedBy {
		return nil
	}
	if err := s.guard.Authorize(ctx, RuleApproveOwn, "campaign", c.UUID, Target(c)); err != nil {
		return errs.Forbidden("You created campaign %s, so someone else approves it: %s (policy %s, which a single-operator site may open).", c.UUID, ApproverText, RuleApproveOwn)
	}
	return nil
}

// ApproverText says who approves a campaign under the default policy.
const ApproverText = "a system member, a manager of the creating project, or a manager of a node's owner that asked for approval, other than the creator"

// actor names a principal in created_by and approved_by.
func actor(p *policies.Principal) string {
	if p == nil {
		return ""
	}
	return p.User
}

// principalMap and principalOf store the creator as the policy saw them,
// so each node's turn is decided for that caller with those roles.
func principalMap(p *policies.Principal) map[string]any {
	if p == nil {
		return map[string]any{}
	}
	return map[string]any{"user": p.User, "issuer": p.Issuer, "subject": p.Subject, "project": p.Project,
		"system": p.System, "roles": p.Roles, "method": p.Method}
}

func principalOf(m map[string]any) *policies.Principal {
	str := func(k string) string { s, _ := m[k].(string); return s }
	p := &policies.Principal{User: str("user"), Issuer: str("issuer"), Subject: str("subject"), Project: str("project"),
		Method: "campaign"}
	p.System, _ = m["system"].(bool)
	if rs, ok := m["roles"].([]any); ok {
		for _, r := range rs {
			if s, ok := r.(string); ok {
				p.Roles = append(p.Roles, s)
			}
		}
	}
	return p
}

// SetState pauses, resumes or cancels a campaign. Cancelling skips the
// nodes not yet started and lets the running ones finish.
func (s *Service) SetState(ctx context.Context, ident, target string) (err error) {
	c, err := s.authorized(ctx, ident, RuleUpdate)
	if err != nil {
		return err
	}
	var from []string
	to := target
	switch target {
	case StatePaused:
		from = []string{StateRunning, StateScheduled}
	case StateRunning:
		from = []string{StatePaused}
		if c.StartAfter != nil && c.StartAfter.After(s.now()) {
			to = StateScheduled
		}
	case StateCancelled:
		from = []string{StatePendingApproval, StateScheduled, StateRunning, StatePaused}
	default:
		return errs.BadRequest("target", "target must be paused, running or cancelled, not %q", target)
	}
	defer func() {
		s.guard.Done(ctx, RuleUpdate, "campaign", c.UUID, err, map[string]any{"target": target, "from": c.State})
	}()
	skipped := 0
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		u := tx.Campaign.Update().Where(campaign.ID(c.ID), campaign.StateIn(from...)).SetState(to).SetUpdatedAt(time.Now())
		if to == StateRunning && c.StartedAt == nil {
			u.SetStartedAt(time.Now())
		}
		n, err := u.Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			cur, err := tx.Campaign.Get(ctx, c.ID)
			if err != nil {
				return err
			}
			return errs.Conflict("Campaign %s is %s; it cannot become %s.", c.UUID, cur.State, target)
		}
		if target == StateCancelled {
			skipped, err = skipPending(ctx, tx, c.ID, "the campaign was cancelled")
		}
		return err
	})
	if err == nil {
		s.Metrics.count(NodeSkipped, skipped)
		s.poke()
	}
	return err
}

// skipPending skips a campaign's pending nodes and says how many.
func skipPending(ctx context.Context, tx *ent.Client, id int, why string) (int, error) {
	return tx.CampaignNode.Update().Where(campaignnode.CampaignID(id), campaignnode.Status(NodePending)).
		SetStatus(NodeSkipped).SetReason(why).SetFinishedAt(time.Now()).Save(ctx)
}

// Approve gives the approvals the caller may give a campaign awaiting
// them: the creating side's (requires_approval; baremetal:campaign:approve
// on the campaign) and each node owner's the owner's policy asked for (the
// same rule with that owner as node.owner). Once none is left the
// campaign starts, or waits for its start_after.
func (s *Service) Approve(ctx context.Context, ident string) (err error) {
	c, err := s.find(ctx, ident)
	if err != nil {
		return err
	}
	rows, err := c.QueryApprovals().All(ctx)
	if err != nil {
		return err
	}
	creator := s.guard.Allowed(ctx, RuleApprove, Target(c))
	var mine, waiting []string
	for _, a := range rows {
		if a.ApprovedBy != nil {
			continue
		}
		if s.guard.Allowed(ctx, RuleApprove, policies.Target{NodeOwner: a.Project}) {
			mine = append(mine, a.Project)
		} else {
			waiting = append(waiting, a.Project)
		}
	}
	ownerOf := slices.ContainsFunc(rows, func(a *ent.CampaignApproval) bool {
		return s.guard.Allowed(ctx, RuleApprove, policies.Target{NodeOwner: a.Project})
	})
	if !creator && !ownerOf {
		return s.guard.Authorize(ctx, RuleApprove, "campaign", c.UUID, Target(c))
	}
	if err := s.ApproveOwn(ctx, c); err != nil {
		return err
	}
	creatorSide := creator && c.RequiresApproval && c.ApprovedBy == nil
	if c.State != StatePendingApproval || (!creatorSide && len(mine) == 0) {
		if c.State == StatePendingApproval {
			return errs.Conflict("Campaign %s awaits the approval of %s, not yours.", c.UUID, strings.Join(waiting, ", "))
		}
		return errs.Conflict("Campaign %s is %s, not awaiting approval.", c.UUID, c.State)
	}
	now := s.now()
	state := StatePendingApproval
	defer func() {
		s.guard.Done(ctx, RuleApprove, "campaign", c.UUID, err, map[string]any{"owners": mine, "creator": creatorSide, "state": state})
	}()
	who := actor(policies.PrincipalFrom(ctx))
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if len(mine) > 0 {
			if err := tx.CampaignApproval.Update().Where(campaignapproval.CampaignID(c.ID), campaignapproval.ProjectIn(mine...),
				campaignapproval.ApprovedByIsNil()).SetApprovedBy(who).SetApprovedAt(now).Exec(ctx); err != nil {
				return err
			}
		}
		u := tx.Campaign.Update().Where(campaign.ID(c.ID), campaign.State(StatePendingApproval)).SetUpdatedAt(now)
		if creatorSide {
			u.SetApprovedBy(who).SetApprovedAt(now)
		}
		if n, err := u.Save(ctx); err != nil || n == 0 {
			if err == nil {
				err = errs.Conflict("Campaign %s is no longer awaiting approval.", c.UUID)
			}
			return err
		}
		left, err := tx.CampaignApproval.Query().Where(campaignapproval.CampaignID(c.ID), campaignapproval.ApprovedByIsNil()).Exist(ctx)
		if err != nil {
			return err
		}
		cur, err := tx.Campaign.Get(ctx, c.ID)
		if err != nil || left || (cur.RequiresApproval && cur.ApprovedBy == nil) {
			return err
		}
		start := tx.Campaign.UpdateOneID(c.ID)
		if c.StartAfter != nil && c.StartAfter.After(now) {
			state = StateScheduled
		} else {
			state = StateRunning
			start.SetStartedAt(now)
		}
		return start.SetState(state).Exec(ctx)
	})
	if err == nil && state != StatePendingApproval {
		s.poke()
	}
	return err
}

// Delete removes a finished campaign's record; one still running (or
// with nodes still running) is a 409.
func (s *Service) Delete(ctx context.Context, ident string) (err error) {
	c, err := s.authorized(ctx, ident, RuleDelete)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleDelete, "campaign", c.UUID, err, nil) }()
	n, err := s.db.Campaign.Delete().Where(campaign.ID(c.ID), campaign.StateIn(finished...), campaign.Running(0)).Exec(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		return errs.Conflict("Campaign %s is %s or has nodes running; cancel it and let them finish first.", c.UUID, c.State)
	}
	return nil
}
