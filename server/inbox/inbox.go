// Package inbox is how Anvil reaches people (issue 43): each project has
// an inbox of notices (a lease starting, ending within a day, ended; the
// node wiped after it; a claim on one of its offers; a tenant asking it to
// look at a node), the operators have one for system scope, and a
// tenant's "Ask the owner to look" is a thread the owner answers and
// closes. Every notice is also an audit row named anvil:notice:<kind>, so
// the operator's webhook receives it, and, when the operator configured
// an SMTP relay and the project set addresses, an e-mail (mail.go).
//
// Notices the conductor sends carry a key unique within their inbox: a
// lease ending that two replicas (or a pass after a restart) both notice
// is one notice, inserted with ON CONFLICT DO NOTHING.
package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/notice"
	"github.com/anvilproject/anvil/ent/setting"
	"github.com/anvilproject/anvil/ent/thread"
	"github.com/anvilproject/anvil/ent/threadpost"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/store"
)

// Rules.
const (
	RuleGet    = "anvil:inbox:get"
	RuleMail   = "anvil:inbox:mail"
	RuleThread = "anvil:thread:get"
	RuleReply  = "anvil:thread:reply"
	RuleClose  = "anvil:thread:close"
)

// Kinds of notice.
const (
	LeaseStarted = "lease_started"
	LeaseEnding  = "lease_ending"
	LeaseEnded   = "lease_ended"
	NodeWiped    = "node_wiped"
	OfferClaimed = "offer_claimed"
	Ask          = "ask"
	AskReply     = "ask_reply"
	AskClosed    = "ask_closed"
)

// EventPrefix names a notice's audit row, which the webhook matches:
// anvil:notice:lease_ending, ….
const EventPrefix = "anvil:notice:"

// Limits on what people write and how much a project may ask to be
// mailed.
const (
	MaxMessage   = 4000
	MaxAddresses = 5
	// listMax bounds one inbox page.
	listMax = 200
)

// Open and Closed are a thread's statuses.
const (
	Open   = "open"
	Closed = "closed"
)

// Notice is what a sender says to one inbox.
type Notice struct {
	// Project is the inbox: a project id, "" for the operators.
	Project string
	Kind    string
	// Key makes the notice once-only in its inbox; "" means every send
	// is a new notice.
	Key           string
	Subject, Body string
	Node, Lease   string
	Thread        string
}

// Service keeps the inboxes and threads.
type Service struct {
	db    *store.DB
	guard *guard.Guard
	// Mailing says an SMTP relay is configured: only then does a notice
	// take its inbox's addresses and wait for the mailer.
	Mailing bool
}

// New returns the inbox service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

func principal(ctx context.Context) *policies.Principal {
	if p := policies.PrincipalFrom(ctx); p != nil {
		return p
	}
	return &policies.Principal{}
}

// inboxOf is the caller's inbox: its project, "" for system scope.
func inboxOf(p *policies.Principal) string {
	if p.System {
		return ""
	}
	return p.Project
}

// Send adds ns in tx (a transaction's client, or the store's), each with
// its audit row, so the notice, its webhook event and the change it tells
// of commit together. A notice whose key its inbox already holds is left
// out, silently: it was sent.
func (s *Service) Send(ctx context.Context, tx *ent.Client, ns ...Notice) error {
	for _, n := range ns {
		id := uuid.NewString()
		key := n.Key
		if key == "" {
			key = id
		}
		mail, to := "", []string(nil)
		if s.Mailing {
			var err error
			if to, err = s.addresses(ctx, tx, n.Project); err != nil {
				return err
			}
			if len(to) > 0 {
				mail = MailPending
			}
		}
		cols := []string{notice.FieldUUID, notice.FieldProject, notice.FieldKind, notice.FieldKey, notice.FieldSubject,
			notice.FieldBody, notice.FieldNodeUUID, notice.FieldLeaseUUID, notice.FieldThreadUUID, notice.FieldCreatedAt, notice.FieldMail}
		vals := []any{id, n.Project, n.Kind, key, n.Subject, n.Body, n.Node, n.Lease, n.Thread, time.Now(), mail}
		if len(to) > 0 {
			// As ent writes a JSON field.
			list, err := json.Marshal(to)
			if err != nil {
				return err
			}
			cols, vals = append(cols, notice.FieldMailTo), append(vals, json.RawMessage(list))
		}
		made, err := store.Upsert(ctx, tx, s.db.Insert(notice.Table).Columns(cols...).Values(vals...), false, notice.FieldProject, notice.FieldKey)
		if err != nil || !made {
			return err
		}
		detail := map[string]any{"kind": n.Kind, "inbox": inboxName(n.Project), "subject": n.Subject}
		for k, v := range map[string]string{"node": n.Node, "lease": n.Lease, "thread": n.Thread} {
			if v != "" {
				detail[k] = v
			}
		}
		if err := tx.AuditEvent.CreateBulk(s.guard.Audit.AllowedRow(ctx, EventPrefix+n.Kind, "notice", id, detail)).Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// inboxName names an inbox in audit rows and mail: the project, or
// "operators".
func inboxName(project string) string {
	if project == "" {
		return "operators"
	}
	return project
}

// ListOptions choose an inbox page.
type ListOptions struct {
	Unread bool
	Limit  int
}

// List returns the caller's inbox, newest first.
func (s *Service) List(ctx context.Context, o ListOptions) ([]*ent.Notice, error) {
	p := principal(ctx)
	if err := s.guard.Authorize(ctx, RuleGet, "notice", "", policies.Target{}); err != nil {
		return nil, err
	}
	q := s.db.Notice.Query().Where(notice.Project(inboxOf(p)))
	if o.Unread {
		q = q.Where(notice.ReadAtIsNil())
	}
	if o.Limit <= 0 || o.Limit > listMax {
		o.Limit = listMax
	}
	return q.Order(ent.Desc(notice.FieldCreatedAt), ent.Desc(notice.FieldID)).Limit(o.Limit).All(ctx)
}

// Unread counts the caller's unread notices; 0 when it may not read its
// inbox (the header's badge asks on every page, so this is no refusal).
func (s *Service) Unread(ctx context.Context) (int, error) {
	if !s.guard.Allowed(ctx, RuleGet, policies.Target{}) {
		return 0, nil
	}
	return s.db.Notice.Query().Where(notice.Project(inboxOf(principal(ctx))), notice.ReadAtIsNil()).Count(ctx)
}

// MarkRead marks the caller's notice id read, or all of its inbox's when
// id is "". Another inbox's notice is not found.
func (s *Service) MarkRead(ctx context.Context, id string) error {
	if err := s.guard.Authorize(ctx, RuleGet, "notice", id, policies.Target{}); err != nil {
		return err
	}
	q := s.db.Notice.Update().Where(notice.Project(inboxOf(principal(ctx))), notice.ReadAtIsNil())
	if id != "" {
		n, err := s.db.Notice.Query().Where(notice.UUID(id), notice.Project(inboxOf(principal(ctx)))).Exist(ctx)
		if err != nil {
			return err
		}
		if !n {
			return errs.NotFound("Notice %s could not be found.", id)
		}
		q = q.Where(notice.UUID(id))
	}
	return q.SetReadAt(time.Now()).Exec(ctx)
}

// mailKey is the setting holding an inbox's addresses.
func mailKey(project string) string { return "inbox:mail:" + inboxName(project) }

func (s *Service) addresses(ctx context.Context, db *ent.Client, project string) ([]string, error) {
	row, err := db.Setting.Query().Where(setting.Key(mailKey(project))).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var to []string
	return to, json.Unmarshal(row.Value, &to)
}

// MailTo returns the addresses the caller's inbox is mailed to.
func (s *Service) MailTo(ctx context.Context) ([]string, error) {
	if err := s.guard.Authorize(ctx, RuleGet, "notice", "", policies.Target{}); err != nil {
		return nil, err
	}
	return s.addresses(ctx, s.db.Client, inboxOf(principal(ctx)))
}

// ParseAddresses reads a list of e-mail addresses separated by commas,
// spaces or lines, refusing anything that is not a bare address.
func ParseAddresses(v string) ([]string, error) {
	var out []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '\n' || r == '\r' || r == '\t' }) {
		a, err := mail.ParseAddress(f)
		if err != nil || a.Name != "" || a.Address != f {
			return nil, errs.BadRequest("addresses", "addresses: %q is not an e-mail address such as ops@example.com", f)
		}
		if !slices.Contains(out, a.Address) {
			out = append(out, a.Address)
		}
	}
	if len(out) > MaxAddresses {
		return nil, errs.BadRequest("addresses", "addresses: give at most %d addresses (a mailing list is one)", MaxAddresses)
	}
	return out, nil
}

// SetMailTo sets the addresses the caller's inbox is mailed to; none
// stops the mail. Notices already made keep the addresses they took.
func (s *Service) SetMailTo(ctx context.Context, to []string) (err error) {
	if err := s.guard.Authorize(ctx, RuleMail, "notice", "", policies.Target{}); err != nil {
		return err
	}
	project := inboxOf(principal(ctx))
	defer func() {
		s.guard.Done(ctx, RuleMail, "inbox", inboxName(project), err, map[string]any{"addresses": to})
	}()
	key := mailKey(project)
	if len(to) == 0 {
		_, err = s.db.Setting.Delete().Where(setting.Key(key)).Exec(ctx)
		return err
	}
	v, _ := json.Marshal(to)
	_, err = store.Upsert(ctx, s.db, s.db.Insert(setting.Table).Columns(setting.FieldKey, setting.FieldValue).Values(key, v), true, setting.FieldKey)
	return err
}

func threadTarget(t *ent.Thread) policies.Target {
	return policies.Target{ThreadOwner: t.Owner, ThreadAsker: t.Asker}
}

// AskInput is a tenant's request that a node's owner look at it.
type AskInput struct {
	Node    *ent.Node
	Failure string
	Message string
}

// Ask opens a thread about in.Node to its owner (the operators when it
// has none), with the caller's message as its first post, and tells the
// owner's inbox. The caller authorized the request (conductor's
// RuleRecover: those who ran the failed runbook).
func (s *Service) Ask(ctx context.Context, in AskInput) (*ent.Thread, error) {
	msg := strings.TrimSpace(in.Message)
	if err := checkText("message", msg); err != nil {
		return nil, err
	}
	p := principal(ctx)
	n := in.Node
	label := NodeLabel(n.Name, n.UUID)
	var t *ent.Thread
	err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		var err error
		t, err = tx.Thread.Create().SetUUID(uuid.NewString()).SetNodeUUID(n.UUID).SetNodeName(deref(n.Name)).
			SetOwner(n.Owner).SetAsker(inboxOf(p)).SetAskedBy(p.User).SetFailure(in.Failure).Save(ctx)
		if err != nil {
			return err
		}
		if msg != "" {
			if err := tx.ThreadPost.Create().SetThreadUUID(t.UUID).SetAuthor(p.User).SetProject(inboxOf(p)).SetBody(msg).Exec(ctx); err != nil {
				return err
			}
		}
		body := fmt.Sprintf("%s of %s asks you to look at node %s.", p.User, ScopeName(inboxOf(p)), label)
		if msg != "" {
			body += "\n\n“" + msg + "”"
		}
		return s.Send(ctx, tx, Notice{Project: t.Owner, Kind: Ask, Key: "ask:" + t.UUID, Node: n.UUID, Thread: t.UUID,
			Subject: fmt.Sprintf("%s asks you to look at node %s", p.User, label), Body: body})
	})
	return t, err
}

func checkText(field, v string) error {
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return errs.BadRequest(field, "%s: write plain text", field)
	}
	if utf8.RuneCountInString(v) > MaxMessage {
		return errs.BadRequest(field, "%s: write at most %d characters", field, MaxMessage)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// NodeLabel names a node for people in notices and threads: its name
// when it has one, else its UUID.
func NodeLabel(name *string, id string) string {
	if name != nil && *name != "" {
		return *name
	}
	return id
}

// ScopeName says whose an inbox or a thread side is, for people: "project
// P", or "the operators" for system scope.
func ScopeName(project string) string {
	if project == "" {
		return "the operators"
	}
	return "project " + project
}

// hidden is a thread the caller may not read: as missing as an unknown
// one.
func hidden(id string) error { return errs.NotFound("Request %s could not be found.", id) }

// Thread returns thread id and its posts, oldest first.
func (s *Service) Thread(ctx context.Context, id string) (*ent.Thread, []*ent.ThreadPost, error) {
	t, err := s.find(ctx, s.db.Client, id, RuleThread)
	if err != nil {
		return nil, nil, err
	}
	posts, err := s.db.ThreadPost.Query().Where(threadpost.ThreadUUID(t.UUID)).Order(ent.Asc(threadpost.FieldID)).All(ctx)
	return t, posts, err
}

// find reads thread id for rule: 404 when the caller may not read it,
// 403 when it may read but not do rule.
func (s *Service) find(ctx context.Context, db *ent.Client, id, rule string) (*ent.Thread, error) {
	t, err := db.Thread.Query().Where(thread.UUID(id)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, hidden(id)
	}
	if err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, RuleThread, threadTarget(t)) {
		return nil, hidden(id)
	}
	if rule != RuleThread {
		if err := s.guard.Authorize(ctx, rule, "thread", t.UUID, threadTarget(t)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Threads lists the threads the caller's scope asked or was asked, open
// ones first, newest first; system readers see every thread.
func (s *Service) Threads(ctx context.Context) ([]*ent.Thread, error) {
	if err := s.guard.Authorize(ctx, RuleGet, "thread", "", policies.Target{}); err != nil {
		return nil, err
	}
	p := principal(ctx)
	q := s.db.Thread.Query()
	if !p.System {
		q = q.Where(thread.Or(thread.Owner(p.Project), thread.Asker(p.Project)))
	}
	ts, err := q.Order(ent.Desc(thread.FieldID)).Limit(listMax).All(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(ts, func(a, b *ent.Thread) int {
		return boolRank(a.Status != Open) - boolRank(b.Status != Open)
	})
	return ts, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Reply posts the caller's answer to thread id and tells the other side:
// the asker when the owner (or an operator) answers, else the owner.
func (s *Service) Reply(ctx context.Context, id, body string) (err error) {
	t, err := s.find(ctx, s.db.Client, id, RuleReply)
	if err != nil {
		return err
	}
	body = strings.TrimSpace(body)
	defer func() { s.guard.Done(ctx, RuleReply, "thread", t.UUID, err, map[string]any{"node": t.NodeUUID}) }()
	if body == "" {
		return errs.BadRequest("message", "message: write your answer")
	}
	if err := checkText("message", body); err != nil {
		return err
	}
	if t.Status != Open {
		return errs.Conflict("This request was closed by %s; ask again from the node's page if it still needs looking at.", t.ClosedBy)
	}
	p := principal(ctx)
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		post, err := tx.ThreadPost.Create().SetThreadUUID(t.UUID).SetAuthor(p.User).SetProject(inboxOf(p)).SetBody(body).Save(ctx)
		if err != nil {
			return err
		}
		to := t.Owner
		if inboxOf(p) != t.Asker || p.System {
			to = t.Asker
		}
		label := NodeLabel(&t.NodeName, t.NodeUUID)
		return s.Send(ctx, tx, Notice{Project: to, Kind: AskReply, Key: fmt.Sprintf("reply:%d", post.ID), Node: t.NodeUUID, Thread: t.UUID,
			Subject: fmt.Sprintf("%s answered about node %s", p.User, label),
			Body:    fmt.Sprintf("%s of %s wrote:\n\n“%s”", p.User, ScopeName(inboxOf(p)), body)})
	})
}

// Close closes thread id, once, and tells the asker.
func (s *Service) Close(ctx context.Context, id string) (err error) {
	t, err := s.find(ctx, s.db.Client, id, RuleClose)
	if err != nil {
		return err
	}
	defer func() { s.guard.Done(ctx, RuleClose, "thread", t.UUID, err, map[string]any{"node": t.NodeUUID}) }()
	p := principal(ctx)
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		won, err := tx.Thread.Update().Where(thread.ID(t.ID), thread.Status(Open)).
			SetStatus(Closed).SetClosedBy(p.User).SetClosedAt(time.Now()).Save(ctx)
		if err != nil {
			return err
		}
		if won == 0 {
			return errs.Conflict("This request is already closed.")
		}
		label := NodeLabel(&t.NodeName, t.NodeUUID)
		return s.Send(ctx, tx, Notice{Project: t.Asker, Kind: AskClosed, Key: "closed:" + t.UUID, Node: t.NodeUUID, Thread: t.UUID,
			Subject: fmt.Sprintf("%s closed your request about node %s", p.User, label),
			Body:    fmt.Sprintf("%s of %s closed the request about node %s.", p.User, ScopeName(inboxOf(p)), label)})
	})
}

// ForNode lists the open threads about node id, for its page.
func (s *Service) ForNode(ctx context.Context, id string) ([]*ent.Thread, error) {
	p := principal(ctx)
	q := s.db.Thread.Query().Where(thread.NodeUUID(id), thread.Status(Open))
	if !p.System {
		q = q.Where(thread.Or(thread.Owner(p.Project), thread.Asker(p.Project)))
	}
	return q.Order(ent.Desc(thread.FieldID)).All(ctx)
}
