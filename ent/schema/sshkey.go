package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// SSHKey is an OpenSSH public key a user saved in their profile, which
// the Deploy panel offers for the instance's config drive. It belongs to
// a principal string rather than a users row: an SSO identity has no
// row, and its keys must not be a same-named local account's.
type SSHKey struct{ ent.Schema }

func (SSHKey) Fields() []ent.Field {
	return []ent.Field{
		// principal is the local account's name, or "sso|issuer|subject"
		// for an OpenID identity, as portal sessions name them.
		field.String("principal").Immutable(),
		field.String("name").MaxLen(64).Immutable(),
		// public_key is the one authorized_keys line, without options.
		field.Text("public_key").Immutable(),
		// fingerprint is its SHA256 fingerprint, as ssh-keygen -l prints it.
		field.String("fingerprint").Immutable(),
		field.Time("created_at").Default(time.Now).Immutable(),
	}
}

func (SSHKey) Indexes() []ent.Index {
	return []ent.Index{index.Fields("principal", "name").Unique()}
}
