package web

import (
	"context"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// The inbox pages (issue 43) call the inbox service, which finds,
// authorizes, validates, acts and audits; the handlers read forms and
// say its refusals where they were asked.

// visibleNodes returns, of the nodes ids name, those the viewer may open,
// by UUID: one query, then the policy per node. A notice about a node the
// viewer no longer sees (a lease that ended) links none.
func (p *Portal) visibleNodes(ctx context.Context, ids []string) (map[string]*ent.Node, error) {
	ns, err := p.DB.Node.Query().Where(node.UUIDIn(ids...)).
		Select(node.FieldUUID, node.FieldName, node.FieldOwner, node.FieldLessee).All(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*ent.Node{}
	for _, n := range ns {
		if p.Guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
			out[n.UUID] = n
		}
	}
	return out, nil
}

func (p *Portal) inboxPage(c *fiber.Ctx) error { return p.showInbox(c, 200, "", "") }

// showInbox renders the inbox; mailErr is a refused change of addresses,
// shown at the form with what was typed.
func (p *Portal) showInbox(c *fiber.Ctx, status int, typed, mailErr string) error {
	ctx := c.UserContext()
	pg, err := p.page(c, "Inbox")
	if err != nil {
		return err
	}
	ns, err := p.Inbox.List(ctx, inbox.ListOptions{})
	if err != nil {
		return p.fail(c, err)
	}
	ids := make([]string, 0, len(ns))
	for _, n := range ns {
		if n.NodeUUID != "" {
			ids = append(ids, n.NodeUUID)
		}
	}
	seen, err := p.visibleNodes(ctx, ids)
	if err != nil {
		return err
	}
	v := views.Inbox{Mailing: p.Inbox.Mailing, CanMail: p.Guard.Allowed(ctx, inbox.RuleMail, policies.Target{}), MailError: mailErr}
	for _, n := range ns {
		row := views.Notice{UUID: n.UUID, Subject: n.Subject, Body: n.Body, At: n.CreatedAt, Unread: n.ReadAt == nil}
		if row.Unread {
			v.Unread++
		}
		if nd := seen[n.NodeUUID]; nd != nil {
			row.NodeURL, row.NodeLabel = "/nodes/"+nd.UUID, nameOr(deref(nd.Name), nd.UUID)
		}
		if n.ThreadUUID != "" {
			row.ThreadURL = "/inbox/threads/" + n.ThreadUUID
		}
		switch {
		case n.Mail == inbox.MailSent:
			row.Mail = "sent to " + strings.Join(n.MailTo, ", ")
		case strings.HasPrefix(n.Mail, inbox.MailFailed):
			row.Mail = "not sent (" + strings.TrimPrefix(n.Mail, inbox.MailFailed) + ")"
		case n.Mail != "":
			row.Mail = "being sent"
		}
		v.Notices = append(v.Notices, row)
	}
	ts, err := p.Inbox.Threads(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		v.Threads = append(v.Threads, views.ThreadRow{UUID: t.UUID, Node: nameOr(t.NodeName, t.NodeUUID), AskedBy: t.AskedBy,
			Asker: inbox.ScopeName(t.Asker), Owner: inbox.ScopeName(t.Owner), Status: t.Status, At: t.CreatedAt})
	}
	if mailErr != "" {
		v.Addresses = typed
	} else if to, err := p.Inbox.MailTo(ctx); err != nil {
		return err
	} else {
		v.Addresses = strings.Join(to, ", ")
	}
	return render(c, status, views.InboxPage(pg, v))
}

// inboxRead marks one notice (?notice=) or the whole inbox read.
func (p *Portal) inboxRead(c *fiber.Ctx) error {
	if err := p.Inbox.MarkRead(c.UserContext(), c.Query("notice")); err != nil {
		return p.fail(c, err)
	}
	return c.Redirect("/inbox", fiber.StatusSeeOther)
}

// inboxMail sets the addresses the viewer's inbox is mailed to.
func (p *Portal) inboxMail(c *fiber.Ctx) error {
	typed := c.FormValue("addresses")
	to, err := inbox.ParseAddresses(typed)
	if err == nil {
		err = p.Inbox.SetMailTo(c.UserContext(), to)
	}
	if err != nil {
		if st := errs.Status(err); st < 500 {
			return p.showInbox(c, st, typed, err.Error())
		}
		return err
	}
	msg := "Notices are no longer mailed."
	if len(to) > 0 {
		msg = "Notices are now mailed to " + strings.Join(to, ", ") + "."
	}
	return p.flashTo(c, "/inbox", msg)
}

func (p *Portal) threadPage(c *fiber.Ctx) error { return p.showThread(c, 200, "", "") }

// showThread renders a request to look at a node; problem is a refused
// answer or close, said above the form, which keeps the draft.
func (p *Portal) showThread(c *fiber.Ctx, status int, problem, draft string) error {
	ctx := c.UserContext()
	t, posts, err := p.Inbox.Thread(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Request about a node")
	if err != nil {
		return err
	}
	target := policies.Target{ThreadOwner: t.Owner, ThreadAsker: t.Asker}
	v := views.ThreadView{UUID: t.UUID, NodeUUID: t.NodeUUID, Node: nameOr(t.NodeName, t.NodeUUID), AskedBy: t.AskedBy,
		Asker: inbox.ScopeName(t.Asker), Owner: inbox.ScopeName(t.Owner), At: t.CreatedAt, Open: t.Status == inbox.Open, ClosedBy: t.ClosedBy,
		CanReply: p.Guard.Allowed(ctx, inbox.RuleReply, target), CanClose: p.Guard.Allowed(ctx, inbox.RuleClose, target),
		Error: problem, Draft: draft}
	if t.ClosedAt != nil {
		v.ClosedAt = *t.ClosedAt
	}
	if !v.CanClose {
		v.CloseWho = "Members of " + inbox.ScopeName(t.Owner) + ", who were asked, and operators close this request when it is handled."
	}
	if seen, err := p.visibleNodes(ctx, []string{t.NodeUUID}); err != nil {
		return err
	} else if seen[t.NodeUUID] != nil {
		v.NodeURL = "/nodes/" + t.NodeUUID
	}
	if summary, advice := plainError(t.Failure); summary != "" {
		v.Failure = strings.TrimSpace(forViewer(isSystem(ctx), summary+" "+advice))
	}
	for _, m := range posts {
		v.Posts = append(v.Posts, views.Post{Author: m.Author, Scope: inbox.ScopeName(m.Project), Body: m.Body, At: m.CreatedAt})
	}
	return render(c, status, views.ThreadPage(pg, v))
}

// threadReply posts the viewer's answer.
func (p *Portal) threadReply(c *fiber.Ctx) error {
	id := c.Params("id")
	msg := c.FormValue("message")
	err := p.Inbox.Reply(c.UserContext(), id, msg)
	if err != nil {
		return p.threadRefused(c, err, msg)
	}
	return p.flashTo(c, "/inbox/threads/"+id, "Sent: the other side finds your answer in their inbox.")
}

// threadClose closes the request.
func (p *Portal) threadClose(c *fiber.Ctx) error {
	id := c.Params("id")
	err := p.Inbox.Close(c.UserContext(), id)
	if err != nil {
		return p.threadRefused(c, err, "")
	}
	return p.flashTo(c, "/inbox/threads/"+id, "Closed: the asker is told the request is handled.")
}

// threadRefused answers a refused answer or close: a hidden request is
// a 404 page; else the request again, with the refusal in words (the
// policy's words replaced by who may) and the draft kept.
func (p *Portal) threadRefused(c *fiber.Ctx, err error, draft string) error {
	switch st := errs.Status(err); {
	case st >= 500:
		return err
	case st == 404:
		return p.fail(c, err)
	case st == 403:
		return p.showThread(c, st, "Your role may not do this here: members of the asking and the asked project answer; the asked project's members and operators close.", draft)
	default:
		return p.showThread(c, st, err.Error(), draft)
	}
}
