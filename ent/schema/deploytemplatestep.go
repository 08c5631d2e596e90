package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// DeployTemplateStep is one step of a deploy template. Unlike a runbook
// step it has a priority, not an order: a deploy interleaves the
// template's steps with the driver's by priority, as Ironic does.
type DeployTemplateStep struct{ ent.Schema }

func (DeployTemplateStep) Fields() []ent.Field {
	return []ent.Field{
		field.Int("deploy_template_id"),
		field.String("interface").MaxLen(32),
		field.String("step").MaxLen(255),
		field.JSON("args", map[string]any{}).Optional(),
		field.Int("priority"),
		// position keeps the steps in the order the client gave them.
		field.Int("position"),
	}
}

func (DeployTemplateStep) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deploy_template", DeployTemplate.Type).Ref("steps").Field("deploy_template_id").Unique().Required(),
	}
}

func (DeployTemplateStep) Indexes() []ent.Index {
	return []ent.Index{index.Fields("deploy_template_id", "position").Unique()}
}
