package api

import (
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
)

// query declares the query parameters a GET route accepts. Any other is a
// 400 naming it, as Ironic answers: a filter Anvil does not know must never
// be silently ignored, or a script that bulk-acts on a "filtered" list
// would act on everything.
func query(names ...string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		var unknown []string
		c.Context().QueryArgs().VisitAll(func(k, _ []byte) {
			if name := string(k); !slices.Contains(names, name) && !slices.Contains(unknown, name) {
				unknown = append(unknown, name)
			}
		})
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return errs.BadRequest(unknown[0], "Unexpected arguments: %s", strings.Join(unknown, ", "))
		}
		return c.Next()
	}
}

// Query parameters per route, as Ironic defines them for the resource.
var (
	nodeListQuery = []string{
		"owner", "lessee", "project", "provision_state", "resource_class", "driver", "maintenance",
		"associated", "instance_uuid", "description_contains", "detail", "fields", "limit", "marker",
		"sort_key", "sort_dir",
		// The rest of Ironic's node filters; those of later microversions
		// are checked against the request's version (listOptions, ringFilter).
		"retired", "fault", "conductor_group", "conductor", "chassis_uuid", "shard", "sharded",
		"parent_node", "include_children",
	}
	fieldsQuery  = []string{"fields"}
	historyQuery = []string{"detail", "limit"}
	eventsQuery  = []string{"user", "project", "result", "rule", "target_id", "limit", "marker"}
	runbookQuery = []string{"owner", "public", "detail", "fields", "limit", "marker"}
	allocQuery   = []string{"node", "resource_class", "state", "owner", "fields", "limit", "marker", "sort_key", "sort_dir"}
)
