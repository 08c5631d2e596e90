package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// BulkRun is what a portal bulk action did on each node, kept so its
// results page has an address a reload, another tab or another replica
// shows again. Only the principal who ran it may read it; it expires
// with the longest a portal session lasts.
type BulkRun struct{ ent.Schema }

func (BulkRun) Fields() []ent.Field {
	return []ent.Field{
		// token is the random name in the results page's address.
		field.String("token").Unique().Immutable(),
		// principal is the portal session's (web.Session.Principal).
		field.String("principal").Immutable(),
		// what is the action in words ("Power on", "Run CUSTOM_X").
		field.String("what").Immutable(),
		// results maps each node's UUID to its outcome: kind ("ok",
		// "skip", "bad") and the words shown. A started action's outcome
		// is settled here once the node is no longer busy.
		field.JSON("results", map[string][2]string{}),
		field.Time("created_at").Immutable(),
		field.Time("expires_at").Immutable(),
	}
}

func (BulkRun) Indexes() []ent.Index {
	return []ent.Index{index.Fields("expires_at")}
}
