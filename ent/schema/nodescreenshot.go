package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
)

// NodeScreenshot is the last screenshot of a node's video console its
// BMC gave (management.screenshot): one row per node, replaced by each
// step, shown to whoever may see the node's console.
type NodeScreenshot struct{ ent.Schema }

func (NodeScreenshot) Fields() []ent.Field {
	return []ent.Field{
		field.Int("node_id").Unique(),
		// MaxScreenshotBytes bounds it: a console's PNG or JPEG is tens
		// of KiB.
		field.Bytes("image").MaxLen(MaxScreenshotBytes),
		// png or jpg, as bmclib's provider names the image's type.
		field.String("file_type").MaxLen(8),
		field.Time("created_at").Default(time.Now),
	}
}

// MaxScreenshotBytes is the largest screenshot kept.
const MaxScreenshotBytes = 8 << 20

func (NodeScreenshot) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("node", Node.Type).Ref("screenshot").Field("node_id").Unique().Required(),
	}
}
