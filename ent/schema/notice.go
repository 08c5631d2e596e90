package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Notice is one message in a project's inbox (or the operators', project
// ""): a lease starting or ending, a node wiped after its tenant, a claim
// on an offer, a tenant asking the owner to look. It names its node,
// lease and thread by UUID, with no edges: a notice outlives a deleted
// node the way a lease does.
type Notice struct{ ent.Schema }

func (Notice) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable(),
		// project is the inbox's: a project id, or "" for the operators
		// (system scope).
		field.String("project").Default("").Immutable(),
		// kind: lease_started, lease_ending, lease_ended, node_wiped,
		// offer_claimed, ask, ask_reply, ask_closed.
		field.String("kind").Immutable(),
		// key makes a notice the conductor may reach twice (two replicas,
		// a pass after a restart) one notice: unique with project.
		field.String("key").Immutable(),
		field.String("subject").Immutable(),
		field.Text("body").Default("").Immutable(),
		field.String("node_uuid").Default("").Immutable(),
		field.String("lease_uuid").Default("").Immutable(),
		field.String("thread_uuid").Default("").Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
		field.Time("read_at").Optional().Nillable(),
		// mail_to lists the addresses the notice is mailed to, fixed when
		// it is made; mail is "" (not mailed), "pending", "sent" or
		// "failed: …", and a mailer claims a pending notice by moving it.
		field.Strings("mail_to").Optional(),
		field.String("mail").Default(""),
	}
}

func (Notice) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("project", "key").Unique(),
		index.Fields("project", "created_at"),
		index.Fields("mail"),
	}
}

// Thread is a tenant's "Ask the owner to look" request about a node: who
// asked (a user of project asker), whom (the node's owner project, ""
// for the operators), the failure they saw, and whether it is open.
type Thread struct{ ent.Schema }

func (Thread) Fields() []ent.Field {
	return []ent.Field{
		field.String("uuid").Unique().Immutable(),
		field.String("node_uuid").Immutable(),
		// node_name is the node's name when asked, for a node since
		// renamed or deleted.
		field.String("node_name").Default("").Immutable(),
		field.String("owner").Default("").Immutable(),
		field.String("asker").Default("").Immutable(),
		field.String("asked_by").Immutable(),
		// failure is the node's last error when asked, as the conductor
		// wrote it; the portal words it for whoever reads the thread.
		field.Text("failure").Default("").Immutable(),
		field.String("status").Default("open"),
		field.String("closed_by").Default(""),
		field.Time("created_at").Default(time.Now).Immutable(),
		field.Time("closed_at").Optional().Nillable(),
	}
}

func (Thread) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("owner", "status"),
		index.Fields("asker", "status"),
		index.Fields("node_uuid"),
	}
}

// ThreadPost is one message of a thread, the first being the asker's.
type ThreadPost struct{ ent.Schema }

func (ThreadPost) Fields() []ent.Field {
	return []ent.Field{
		field.String("thread_uuid").Immutable(),
		field.String("author").Immutable(),
		// project is the author's scope: a project id, or "" for system.
		field.String("project").Default("").Immutable(),
		field.Text("body").Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
	}
}

func (ThreadPost) Indexes() []ent.Index {
	return []ent.Index{index.Fields("thread_uuid", "created_at")}
}
