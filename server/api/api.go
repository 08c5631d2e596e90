// Package api serves Anvil's Ironic-compatible JSON API under /v1. Handlers
// are thin: parse, call one service method, write JSON. Identity comes from
// the context the auth middleware filled; nothing here reads credentials.
package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/internal/version"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/bootiso"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/chassis"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/deploytemplates"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/inspectionrules"
	"github.com/anvilproject/anvil/server/leasing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/ratelimit"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/validtext"
	"github.com/anvilproject/anvil/server/volume"
	"github.com/anvilproject/anvil/server/wipes"
)

// MaxBody is the largest request body the API accepts; the app enforces it
// before a body is read.
const MaxBody = 1 << 20

// API holds the services the JSON handlers call.
type API struct {
	Nodes *nodes.Service
	Ops   *conductor.Ops
	// Runbooks serves /v1/runbooks.
	Runbooks *runbooks.Service
	// Allocations serves /v1/allocations.
	Allocations *allocations.Service
	// Campaigns serves /v1/campaigns, an Anvil extension.
	Campaigns *campaigns.Service
	// Wipes serves /v1/wipe_records, an Anvil extension.
	Wipes *wipes.Service
	// Ports serves ports, portgroups and VIFs.
	Ports *ports.Service
	// Chassis serves /v1/chassis.
	Chassis *chassis.Service
	// Volume serves /v1/volume.
	Volume *volume.Service
	// DeployTemplates serves /v1/deploy_templates.
	DeployTemplates *deploytemplates.Service
	// InspectionRules serves /v1/inspection_rules.
	InspectionRules *inspectionrules.Service
	// FirmwareImages serves /v1/anvil/firmware-images and /firmware/.
	FirmwareImages *fwimages.Store
	// BootISOs serves the agent ISOs the conductor builds at /boot-iso/;
	// nil serves none.
	BootISOs *bootiso.Store
	// AgentLogs serves /v1/nodes/{node}/agent_logs, an Anvil
	// extension; nil serves none.
	AgentLogs *agentlogs.Service
	// Ramdisk serves the agent's /v1/lookup and /v1/heartbeat; AgentLimit
	// bounds them per client address (nil: no limit).
	// Leasing serves ESI-Leap's API under /leasing (leasing.go).
	Leasing    *leasing.Service
	Ramdisk    *ramdisk.Service
	AgentLimit *ratelimit.Limiter
	Guard      *guard.Guard
	Audit      *audit.Log
	Log        *slog.Logger
}

type verKey struct{}

// ver returns the negotiated microversion of the request.
func ver(c *fiber.Ctx) Version {
	v, _ := c.Locals(verKey{}).(Version)
	return v
}

// Negotiate is middleware for /v1: it settles the microversion and sets the
// version headers on every response. Body sizes are bounded before this,
// by the app's per-route limits (MaxBody for /v1).
func Negotiate(c *fiber.Ctx) error {
	v, err := negotiate(c)
	versionHeaders(c, v)
	if err != nil {
		return err
	}
	c.Locals(verKey{}, v)
	return stripJSON(c, v)
}

type jsonKey struct{}

// stripJSON is Ironic's JsonExtensionMiddleware: a request that names its
// version in X-OpenStack-Ironic-API-Version below 1.91 and whose path ends
// in ".json" is routed without the suffix; if that finds nothing, the
// resource is looked up again with it, as Ironic's *_with_suffix lookups
// do for a name that really ends in ".json". A miss changes nothing, so
// the second routing is safe for writes too.
func stripJSON(c *fiber.Ctx, v Version) error {
	if c.Locals(jsonKey{}) != nil {
		return c.Next()
	}
	path := strings.TrimRight(strings.Clone(c.Path()), "/")
	if v >= VerDotJSON || c.Get(hdrIronic) == "" || !strings.HasSuffix(path, ".json") {
		return c.Next()
	}
	orig := strings.Clone(c.Path()) // fiber's strings alias its buffers
	c.Locals(jsonKey{}, true)
	c.Path(strings.TrimSuffix(path, ".json"))
	err := c.RestartRouting()
	// The app's handlers write their errors themselves, so a miss shows
	// in the response.
	if err != nil || c.Response().StatusCode() != fiber.StatusNotFound {
		return err
	}
	c.Response().ResetBody()
	c.Status(fiber.StatusOK)
	c.Path(orig)
	return c.RestartRouting()
}

// Register mounts the API's routes. Root version discovery lives outside
// /v1 and needs no authentication, as in Ironic.
func (a *API) Register(root fiber.Router, v1 fiber.Router, leases fiber.Router) {
	root.Get("/", a.root)
	a.registerLeasing(root, leases)
	v1.Get("/", a.v1)
	v1.Get("/nodes", query(nodeListQuery...), a.listNodes(false))
	v1.Get("/nodes/detail", query(nodeListQuery...), a.listNodes(true))
	v1.Post("/nodes", a.createNode)
	v1.Get("/nodes/:node", query(fieldsQuery...), a.getNode)
	v1.Patch("/nodes/:node", a.patchNode)
	v1.Delete("/nodes/:node", a.deleteNode)
	v1.Get("/nodes/:node/traits", query(), a.listTraits)
	v1.Put("/nodes/:node/traits", oldTraits, a.setTraits)
	v1.Delete("/nodes/:node/traits", oldTraits, a.deleteTraits)
	v1.Put("/nodes/:node/traits/:trait", oldTraits, a.addTrait)
	v1.Delete("/nodes/:node/traits/:trait", oldTraits, a.deleteTrait)
	v1.Put("/nodes/:node/maintenance", a.setMaintenance)
	v1.Delete("/nodes/:node/maintenance", a.clearMaintenance)
	v1.Get("/nodes/:node/validate", query(), a.validateNode)
	// Every method: Ironic's node lookup refuses history below 1.78.
	v1.Use("/nodes/:node/history", subSince(VerHistory, "node history"))
	v1.Get("/nodes/:node/history", query(historyQuery...), a.listHistory)
	v1.Get("/nodes/:node/history/:event", query(), a.getHistory)
	v1.Get("/events", query(eventsQuery...), a.listEvents)
	a.registerStates(v1)
	a.registerManagement(v1)
	a.registerRunbooks(v1)
	a.registerAllocations(v1)
	a.registerCampaigns(v1)
	a.registerWipes(v1)
	a.registerDrivers(v1)
	a.registerPorts(v1)
	a.registerChassis(v1)
	a.registerVolume(v1)
	a.registerDeployTemplates(v1)
	a.registerInspectionRules(v1)
	a.registerVendorPassthru(v1)
	a.registerHardware(v1)
	a.registerFirmware(v1)
	a.registerShards(v1)
	a.registerInspection(v1)
	a.registerAgent(v1)
	a.registerAgentLogs(v1)
	a.registerFirmwareImages(root, v1)
	// After every states/<x> route: Ironic's states controller has no
	// other PUT, which its router answers 405.
	v1.Put("/nodes/:node/states/:state", func(c *fiber.Ctx) error {
		return fiber.NewError(fiber.StatusMethodNotAllowed, "The states that can be set are power, provision, raid, boot_mode, secure_boot and console, not "+c.Params("state"))
	})
	a.registerIPXE(root)
	if a.BootISOs != nil {
		root.Get(bootiso.RoutePrefix+":name", a.downloadBootISO)
	}
}

func baseURL(c *fiber.Ctx) string { return c.BaseURL() }

func (a *API) root(c *fiber.Ctx) error {
	versionHeaders(c, 0)
	vi := versionInfo(baseURL(c))
	return c.JSON(fiber.Map{
		"name":            "OpenStack Ironic API",
		"description":     "Anvil: bare-metal self-service with an Ironic-compatible API.",
		"default_version": vi,
		"versions":        []fiber.Map{vi},
		"anvil_version":   anvilVersion,
	})
}

// anvilVersion is the running build's release version, an Anvil key
// beside Ironic's in the / and /v1 documents (Ironic's clients ignore
// keys they do not know): a client or an operator's script can tell which
// release answers, as the start log line and the portal's footer do.
var anvilVersion = version.Get().Version

// v1Resources are the collections Ironic's /v1 document links, with the
// version each appears from (its VERSIONED_CONTROLLERS; continue_inspection
// is served from 1.1 but shown from 1.84, as Ironic hides it).
var v1Resources = []struct {
	name  string
	since Version
}{
	{"chassis", VerMin}, {"nodes", VerMin}, {"ports", VerMin}, {"drivers", VerMin},
	{"portgroups", VerPortgroups}, {"volume", VerVolume}, {"lookup", VerRamdisk}, {"heartbeat", VerRamdisk},
	{"conductors", VerConductor}, {"allocations", VerAllocations}, {"events", VerEvents},
	{"deploy_templates", VerDeployTmpl}, {"shards", VerShard}, {"runbooks", VerRunbooks},
	{"inspection_rules", VerInspectionRules}, {"continue_inspection", VerInspectCallback},
}

// v1 is Ironic's version 1 document: its links, media types, and a pair
// of links to each collection the request's version has.
func (a *API) v1(c *fiber.Ctx) error {
	b := baseURL(c)
	out := fiber.Map{
		"id": "v1",
		"links": []fiber.Map{link(b+"/v1/", "self"),
			{"href": "https://docs.openstack.org/ironic/latest/contributor/webapi.html", "rel": "describedby", "type": "text/html"}},
		"media_types":   fiber.Map{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"},
		"version":       versionInfo(b),
		"anvil_version": anvilVersion,
	}
	for _, r := range v1Resources {
		if ver(c) >= r.since {
			out[r.name] = []fiber.Map{link(b+"/v1/"+r.name+"/", "self"), link(b+"/"+r.name+"/", "bookmark")}
		}
	}
	return c.JSON(out)
}

// ErrorHandler writes every error in Ironic's shape: error_message holds a
// JSON string with faultstring and faultcode, which Ironic's clients
// decode and print. Unexpected errors are logged and reported without
// internals.
func ErrorHandler(log *slog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		status, msg := errs.Status(err), err.Error()
		var fe *fiber.Error
		if errors.As(err, &fe) {
			status, msg = fe.Code, fe.Message
			if status == 404 {
				msg = "The resource could not be found: " + c.Path()
			}
		}
		if status == 500 {
			log.ErrorContext(c.UserContext(), "request failed", "err", err, "method", c.Method(), "path", c.Path())
			msg = "An internal error occurred; the request id in the logs has details."
			// A database restart or failover is the service's trouble, not
			// a bug: 503 tells clients and load balancers to retry.
			if store.Unreachable(err) {
				status, msg = 503, "The database is unavailable; retry shortly."
				c.Set("Retry-After", "2")
			}
		}
		fault := "Client"
		if status >= 500 {
			fault = "Server"
		}
		body := fiber.Map{"faultstring": msg, "faultcode": fault, "debuginfo": nil}
		if strings.HasPrefix(c.Path(), LeasingPrefix+"/") {
			// ESI-Leap answers wsme's fault object itself.
			return c.Status(status).JSON(body)
		}
		inner, _ := json.Marshal(body)
		if c.Get(hdrIronicMin) == "" && strings.HasPrefix(c.Path(), "/v1") {
			versionHeaders(c, 0)
		}
		return c.Status(status).JSON(fiber.Map{"error_message": string(inner)})
	}
}

// bind decodes a JSON body into v, naming the problem on failure.
func bind(c *fiber.Ctx, v any) error {
	body := c.Body()
	if len(body) == 0 {
		return errs.BadRequest("body", "a JSON body is required")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			field := ute.Field
			if field == "" {
				// The body itself is of the wrong kind.
				field = "body"
			}
			return errs.BadRequest(field, "%s must be %s, not %s", field, jsonKind(ute.Type.Kind().String()), ute.Value)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return errs.BadRequest(f, "unknown attribute %q", f)
		}
		return errs.BadRequest("body", "the body is not valid JSON: %v", err)
	}
	if dec.More() {
		return errs.BadRequest("body", "the body holds more than one JSON value")
	}
	return nil
}

func jsonKind(k string) string {
	switch k {
	case "map", "struct":
		return "an object"
	case "slice":
		return "a list"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "ptr":
		return "a string or null"
	}
	return "a number"
}

// CheckText is middleware for /v1 after authentication: a body whose
// JSON holds a NUL or invalid UTF-8 anywhere, or such a path or query
// parameter, is a 400 naming where, before any handler or service reads
// it (validtext says why). The refusal depends on the request alone, so
// answering it before the resource is looked up tells nothing about it.
// A streamed body (a firmware image) is its handler's to read.
func CheckText(c *fiber.Ctx) error {
	if err := validtext.String("path", c.Path()); err != nil {
		return err
	}
	var bad error
	c.Request().URI().QueryArgs().VisitAll(func(k, v []byte) {
		if bad == nil {
			if bad = validtext.String("query parameter", string(k)); bad == nil {
				bad = validtext.String(string(k), string(v))
			}
		}
	})
	if bad != nil {
		return bad
	}
	if c.Request().IsBodyStream() {
		return c.Next()
	}
	if err := validtext.JSON(c.Body()); err != nil {
		return err
	}
	return c.Next()
}
