// Package baseline is the schema of the last release before versioned
// migrations (commit 5b855fe): a frozen copy of the ent/migrate/schema.go
// it generated, which migration step 1 creates. It never follows the ent
// schema again, so step 1 builds the same tables however the schema has
// moved since, and the steps after it start from a known state. Never
// regenerate or edit it; add a step instead (see store.Migrations).
package baseline
