// Package server wires Anvil together: database, policy, services, the
// JSON API, the portal and the conductor, behind one fiber app.
package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/pprof"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"

	"github.com/anvilproject/anvil/ent"
	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/authn"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bodylimit"
	"github.com/anvilproject/anvil/server/bootiso"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/chassis"
	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/config"
	"github.com/anvilproject/anvil/server/deploytemplates"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/fleetmetrics"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/imagecache"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/inspectionrules"
	"github.com/anvilproject/anvil/server/keystone"
	"github.com/anvilproject/anvil/server/leasing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/obs"
	"github.com/anvilproject/anvil/server/oidclogin"
	"github.com/anvilproject/anvil/server/override"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/ratelimit"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/volume"
	"github.com/anvilproject/anvil/server/webhook"
	"github.com/anvilproject/anvil/server/wipes"
	"github.com/anvilproject/anvil/web"
)

// Options are the settings an App is built from.
type Options struct {
	Database string
	// Pool sizes the database connection pool; zero values are defaults.
	Pool store.Pool
	// ManualMigrate refuses a database with pending migrations instead of
	// applying them (serve --auto-migrate=false), for operators who
	// upgrade with anvil db upgrade, e.g. as a deploy step whose
	// database role alone may change the schema.
	ManualMigrate bool
	// AccessLog is "on" (also when empty), "off" or a sample rate such as
	// "0.1"; server errors are logged whatever it says.
	AccessLog string
	// AuthNone turns authentication off: every request acts as a system
	// admin. Only for development, and only on loopback.
	AuthNone bool
	// ListenName is the host part of the listen address (serve --listen),
	// which --auth none answers to besides loopback names.
	ListenName string
	Log        *slog.Logger
	// Bootstrap receives the first admin's one-time password when the
	// database had no users; nil discards it (tests create their own).
	Bootstrap func(user, password string)
	// SessionSecret derives the portal's cookie keys; empty means keys
	// generated on first start and kept in the database.
	SessionSecret string
	// OIDC signs portal users in and verifies bearer JWTs; nil turns
	// OpenID Connect off. OIDCRolesMaxAge is how long an SSO portal
	// session acts on its roles before reading them again at the
	// provider; zero means web.DefaultRolesMaxAge.
	OIDC            *oidclogin.Provider
	OIDCRolesMaxAge time.Duration
	// PolicyDir is the policy.d directory; PolicyOverrideEnabled turns
	// overrides on (off: the defaults, whatever the directory holds).
	PolicyDir             string
	PolicyOverrideEnabled bool
	// ServiceProject is the elevated service project: its service-role
	// users pass Ironic's rule:service_role. Empty means "service".
	ServiceProject string
	// Conductor configures this process's conductor; its Name defaults
	// to the host name.
	Conductor conductor.Config
	// AllocationMaxLease, when above zero, is the longest lease a
	// project-scoped caller may give an allocation (its
	// extra.anvil_expires_at); zero leaves leases uncapped and optional.
	AllocationMaxLease time.Duration
	// LeaseQuota bounds each project's leases (serve --lease-max-nodes,
	// --lease-max-node-hours); zero values leave them unbounded.
	LeaseQuota leasing.Quota
	// PasswordHashCost is the bcrypt cost of the password hashes local
	// accounts get (identity.Service.PasswordCost); bcrypt's default
	// when 0.
	PasswordHashCost int
	// TrustedProxies are the networks whose X-Forwarded-For is believed
	// for the client's address (throttling, logs), and whose
	// X-Forwarded-Proto and X-Forwarded-Host for the scheme and host of
	// the URLs Anvil hands out; none by default.
	TrustedProxies []net.IPNet
	// FirmwareDir keeps uploaded firmware images; empty means
	// config.FirmwareDir of the database. FirmwareURL is Anvil's address
	// as BMCs reach it; empty means the listener's (config.PublicURL).
	// FirmwareMaxBytes bounds an upload; 0 means fwimages.DefaultMaxBytes.
	FirmwareDir      string
	FirmwareURL      string
	FirmwareMaxBytes int64
	// BootISODir keeps the agent ISOs the conductor builds, served under
	// FirmwareURL's address at /boot-iso/; empty means
	// config.BootISODir of the database.
	BootISODir string
	// MetricsToken, when set, is the bearer token /metrics requires;
	// empty means /metrics answers loopback scrapers only.
	MetricsToken string
	// IdleRelease is how long without a request before the heap's free
	// headroom goes back to the operating system (obs.Idle); zero never.
	IdleRelease time.Duration
	// HSTS, when more than zero, is the max-age of the
	// Strict-Transport-Security header on every answer: set by serve
	// when it serves TLS itself.
	HSTS time.Duration
	// MaxConnections bounds the connections open at once, idle kept-alive
	// ones included; past it a new connection gets a 503. Zero means
	// DefaultMaxConnections.
	MaxConnections int
	// Pprof serves Go's runtime profiles at /debug/pprof/ to whoever may
	// read /metrics: heap, goroutines and CPU of a running replica, to
	// find what grows. Off by default.
	Pprof bool
	// Webhook receives the audit events its rules choose; a zero URL
	// sends none.
	Webhook webhook.Config
	// Mail is the SMTP relay inbox notices are mailed through; a zero
	// Addr sends none.
	Mail inbox.MailConfig
}

// App is a running Anvil: everything one process serves.
type App struct {
	DB     *store.DB
	Policy *policies.Enforcer
	Audit  *audit.Log
	Guard  *guard.Guard
	Nodes  *nodes.Service
	IDs    *identity.Service
	Cond   *conductor.Conductor
	// Runbooks is the runbook service.
	Runbooks *runbooks.Service
	// Allocations is the allocation service.
	Allocations *allocations.Service
	// Campaigns rolls runbooks over many nodes.
	Campaigns *campaigns.Service
	// Wipes reads the wipe records automated cleaning leaves.
	Wipes *wipes.Service
	// Leasing serves offers and leases (ESI-Leap's API at /leasing).
	Leasing *leasing.Service
	// Ports is the port, portgroup and VIF service.
	Ports  *ports.Service
	Portal *web.Portal
	// Firmware is the store of uploaded firmware images.
	Firmware *fwimages.Store
	// BootISOs keeps the agent ISOs the conductor builds.
	BootISOs *bootiso.Store
	// Overrides keeps the enforcer in step with policy.d and the stored
	// override.
	Overrides *override.Manager
	// Inbox keeps projects' notices and "Ask the owner" threads.
	Inbox *inbox.Service
	// Mailer mails notices; nil when no relay is configured.
	Mailer *inbox.Mailer
	// Webhook delivers audit events; nil when none is configured.
	Webhook   *webhook.Dispatcher
	Fiber     *fiber.App
	Metrics   *obs.Metrics
	idle      obs.Idle
	opts      Options
	accessLog float64
	agentNote agentNetworksNote
}

// New opens the database, migrates it (or, with ManualMigrate, checks
// it needs no migration) and builds the app.
func New(ctx context.Context, o Options) (*App, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	access, err := obs.ParseAccessLog(o.AccessLog)
	if err != nil {
		return nil, err
	}
	// Before the database: a webhook that could not be sent to, or would
	// send unsigned events, stops the start.
	if err := o.Webhook.Validate(); err != nil {
		return nil, err
	}
	if o.PasswordHashCost != 0 {
		if err := identity.ValidPasswordCost(o.PasswordHashCost); err != nil {
			return nil, fmt.Errorf("password hash cost: %w", err)
		}
	}
	db, err := store.OpenPool(ctx, o.Database, o.Pool)
	if err != nil {
		return nil, err
	}
	// A database a newer anvil upgraded is refused either way.
	if o.ManualMigrate {
		err = db.RequireCurrent(ctx)
	} else {
		err = autoMigrate(ctx, db, o.Log)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	if db.Unindexed != nil {
		o.Log.Warn("node name search reads every node: no trigram index", "err", db.Unindexed)
	}
	if err := db.Analyze(ctx); err != nil {
		db.Close()
		return nil, err
	}
	enf, err := policies.New(policies.Defaults(), nil, policies.ServiceProject(o.ServiceProject))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("policy: %w", err)
	}
	a := &App{DB: db, Policy: enf, Metrics: obs.NewMetrics(), opts: o, accessLog: access}
	// The pool's counters (go_sql_*: open, in use, waits, closed for being
	// idle) show whether --db-max-open and --db-max-idle fit the load.
	a.Metrics.Registry.MustRegister(collectors.NewDBStatsCollector(db.SQL, "anvil"))
	a.Metrics.Registry.MustRegister(fleetmetrics.New(db, o.Log))
	a.Audit = audit.New(db.Client, o.Log)
	if o.PolicyDir == "" {
		o.PolicyDir = "policy.d"
	}
	a.Overrides = &override.Manager{DB: db, Enf: enf, Dir: o.PolicyDir, Enabled: o.PolicyOverrideEnabled, Log: o.Log}
	// Before anything is served: a broken policy.d must not leave the
	// wider defaults in force.
	if err := a.Overrides.Start(ctx); err != nil {
		db.Close()
		return nil, err
	}
	a.Guard = &guard.Guard{Enforcer: enf, Audit: a.Audit}
	a.Nodes = nodes.New(db, a.Guard)
	a.IDs = identity.New(db, a.Audit)
	a.IDs.PasswordCost = o.PasswordHashCost
	a.Runbooks = runbooks.New(db, a.Guard)
	a.Allocations = allocations.New(db, a.Guard)
	a.Allocations.MaxLease = o.AllocationMaxLease
	a.Ports = ports.New(db, a.Guard, a.Nodes)
	// VIFs follow the node's network interface: noop records nothing.
	a.Ports.NetworkInterface = func(n *ent.Node) string {
		if n.NetworkInterface != "" {
			return n.NetworkInterface
		}
		return bmc.DefaultInterface(n.Driver, "network")
	}
	a.BootISOs = &bootiso.Store{Dir: o.BootISODir, BaseURL: o.FirmwareURL}
	if a.BootISOs.Dir == "" {
		a.BootISOs.Dir = config.BootISODir(o.Database)
	}
	o.Conductor.Agent.ISOs = a.BootISOs
	if o.Conductor.Agent.ImageCacheDir == "" {
		o.Conductor.Agent.ImageCacheDir = config.ImageCacheDir(o.Database)
	}
	if o.Conductor.Agent.LogDir == "" {
		o.Conductor.Agent.LogDir = config.AgentLogDir(o.Database)
	}
	// Each concern's metrics are counted where it happens, into this
	// app's registry (tests run several apps in one process).
	reg := a.Metrics.Registry
	o.Conductor.BMC.Metrics = bmc.NewMetrics(reg)
	o.Conductor.Metrics = conductor.NewMetrics(reg)
	o.Conductor.Agent.ImageCacheMetrics = imagecache.NewMetrics(reg, o.Conductor.Agent.ImageCacheDir)
	a.Firmware = &fwimages.Store{Dir: o.FirmwareDir, BaseURL: o.FirmwareURL, MaxBytes: o.FirmwareMaxBytes, Guard: a.Guard}
	if a.Firmware.Dir == "" {
		a.Firmware.Dir = config.FirmwareDir(o.Database)
	}
	if a.Firmware.MaxBytes <= 0 {
		a.Firmware.MaxBytes = fwimages.DefaultMaxBytes
	}
	o.Conductor.FirmwareImages = a.Firmware
	a.Cond = conductor.New(db, o.Log, o.Conductor)
	a.Cond.Allocate(a.Allocations)
	a.Leasing = leasing.New(db, a.Guard)
	a.Leasing.Quota = o.LeaseQuota
	a.Cond.Lease(a.Leasing)
	a.Inbox = inbox.New(db, a.Guard)
	a.Inbox.Mailing = o.Mail.Addr != ""
	a.Leasing.Inbox = a.Inbox
	a.Cond.Notify(a.Inbox)
	ops := &conductor.Ops{C: a.Cond, Nodes: a.Nodes, Guard: a.Guard, Runbooks: a.Runbooks, Inbox: a.Inbox}
	a.Campaigns = campaigns.New(db, a.Guard, a.Nodes, a.Runbooks, ops)
	a.Campaigns.Metrics = campaigns.NewMetrics(reg)
	a.Wipes = wipes.New(db, a.Guard)
	a.Cond.Campaign(a.Campaigns)
	a.Cond.MakePorts(a.Ports)
	if a.Webhook, err = webhook.New(db, o.Webhook, o.Log, webhook.NewMetrics(reg)); err != nil {
		db.Close()
		return nil, err
	}
	if a.Mailer, err = inbox.NewMailer(db, o.Mail, o.Log); err != nil {
		db.Close()
		return nil, err
	}
	if !o.AuthNone {
		pw, err := a.IDs.Bootstrap(ctx)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("bootstrap admin: %w", err)
		}
		if pw != "" && o.Bootstrap != nil {
			o.Bootstrap(identity.BootstrapUser, pw)
		}
	}
	hash, block, err := web.LoadKeys(ctx, db, o.SessionSecret)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("session keys: %w", err)
	}
	a.Portal = &web.Portal{DB: db, IDs: a.IDs, Nodes: a.Nodes, Guard: a.Guard, Sessions: web.NewSessions(hash, block), Log: o.Log,
		Runbooks: a.Runbooks, Allocations: a.Allocations, Ports: a.Ports, Firmware: a.Firmware, PolicyStatus: a.Overrides.Status,
		Admin: &web.Admin{DB: db, Audit: a.Audit, Enforcer: enf, Overrides: a.Overrides, Key: web.FormKey(hash)},
		Ops:   ops, Campaigns: a.Campaigns, Wipes: a.Wipes, AgentLogs: a.agentLogs(), Leasing: a.Leasing, Inbox: a.Inbox}
	if o.OIDC != nil {
		a.Portal.SSO, a.Portal.RolesMaxAge = o.OIDC, o.OIDCRolesMaxAge
	}
	a.Fiber = a.routes()
	return a, nil
}

// agentLogs is the agent logs as callers read them; nil when the
// conductor keeps none.
func (a *App) agentLogs() *agentlogs.Service {
	if a.Cond.AgentLogs() == nil {
		return nil
	}
	return &agentlogs.Service{Store: a.Cond.AgentLogs(), Nodes: a.Nodes}
}

// Request body limits: a portal form is a few fields (a runbook's steps
// at most); a policy upload is a zip of at most override.MaxZipBytes in a
// multipart envelope; the API's JSON has api.MaxBody.
const (
	portalFormMax   = 64 << 10
	policyUploadMax = override.MaxZipBytes + 64<<10
)

// DefaultMaxConnections bounds the connections served at once (with
// their buffers): far above what API clients, portals, BMCs and agents
// open together on most sites, far below fasthttp's default.
const DefaultMaxConnections = 4096

// The ramdisk agent's lookups and heartbeats, per client address: an
// agent heartbeats every 90 to 180 s and retries a lookup with backoff,
// so a burst of 20 and one a second leave room for a few machines behind
// one address and bound an anonymous flood.
const (
	agentRate  = 1.0
	agentBurst = 20
)

func (a *App) routes() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:      "anvil",
		ErrorHandler: a.errorHandler(),
		// Bodies are streamed and bounded per route by bodylimit, before
		// anything reads them; BodyLimit only sizes fasthttp's prefetch.
		BodyLimit:                    policyUploadMax,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		DisableStartupMessage:        true,
		// Fiber's strings (Method, Path, Params, Query, Get, FormValue)
		// otherwise point into fasthttp's buffers, which the next request
		// overwrites; metric labels, logs, audit rows and caches keep them.
		Immutable:    true,
		ReadTimeout:  60 * time.Second,
		WriteTimeout: 60 * time.Second,
		IdleTimeout:  120 * time.Second,
		// Each open connection holds a 4 KiB read and a 4 KiB write buffer
		// and a request context; fasthttp's default allows 262,144 at once.
		// Past this bound a new connection gets a 503.
		Concurrency: cmp.Or(a.opts.MaxConnections, DefaultMaxConnections),
		// The scheme and host in the URLs Anvil hands out (links, next
		// markers, Location) and the portal cookie's Secure flag come from
		// X-Forwarded-Proto and X-Forwarded-Host only when the peer is one
		// of --trusted-proxies, as X-Forwarded-For does (clientip): Fiber
		// otherwise believes them from anyone.
		EnableTrustedProxyCheck: true,
		TrustedProxies:          proxyStrings(a.opts.TrustedProxies),
	})
	if a.opts.AuthNone {
		// Before anything answers: see loopbackHost.
		app.Use(a.loopbackHost)
	}
	// First, so that everything after it sees the path it is served as.
	app.Use(a.unversioned)
	if a.opts.HSTS > 0 {
		// Only a server that serves TLS itself says so: behind a proxy
		// the proxy decides.
		hsts := fmt.Sprintf("max-age=%d", int(a.opts.HSTS.Seconds()))
		app.Use(func(c *fiber.Ctx) error {
			c.Set("Strict-Transport-Security", hsts)
			return c.Next()
		})
	}
	app.Use(recover.New())
	app.Use(clientip.New(a.opts.TrustedProxies).Middleware())
	app.Use(obs.Middleware(a.opts.Log, a.Metrics, a.accessLog))
	limits := bodylimit.Limits{Default: portalFormMax, Rules: []bodylimit.Rule{
		{Path: "/admin/policy", Max: policyUploadMax},
		{Path: "/nodes/import", Max: web.ImportMax},
		// A multipart envelope around the image adds a few hundred bytes.
		{Path: api.FirmwareImagesPath, Max: int(a.Firmware.MaxBytes) + 64<<10, Stream: true},
		{Prefix: "/v1", Max: api.MaxBody}, {Prefix: api.LeasingPrefix, Max: api.MaxBody}}}
	app.Server().ContinueHandler = limits.Continue
	// A BMC downloading a built agent ISO (hundreds of MiB) over a slow
	// management network, or an agent a cached image, needs longer than
	// WriteTimeout, which fasthttp applies to a whole response.
	app.Server().HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		if bytes.HasPrefix(h.RequestURI(), []byte(bootiso.RoutePrefix)) {
			return fasthttp.RequestConfig{WriteTimeout: time.Hour}
		}
		return a.imageWriteTimeout(h)
	}
	app.Use(limits.Middleware())
	app.Get(imagecache.RoutePrefix+":token", a.serveImage)
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })
	app.Get("/readyz", a.readyz)
	app.Get("/metrics", obs.ScrapeAccess(a.opts.MetricsToken), adaptor.HTTPHandler(promhttp.HandlerFor(a.Metrics.Registry, promhttp.HandlerOpts{})))
	if a.opts.Pprof {
		// A profile names code paths and holds request data in its
		// samples: the same guard as /metrics.
		app.Use("/debug/pprof", obs.ScrapeAccess(a.opts.MetricsToken), pprof.New())
	}
	// After the health checks, scrapes and profiles: those are not load.
	a.idle.After = a.opts.IdleRelease
	app.Use(a.idle.Touch)
	v1 := app.Group("/v1", api.Negotiate, a.authenticate(), api.CheckText)
	if !a.opts.AuthNone {
		// Before the API: the portal answers GET / for browsers and passes
		// every other client on to version discovery.
		a.Portal.Register(app)
		// ESI-Leap registers itself as service type lease, name esi-leap.
		(&keystone.Handler{IDs: a.IDs, Catalog: []keystone.Endpoint{{Type: "baremetal", Name: "ironic", Path: "/"},
			{Type: "lease", Name: "esi-leap", Path: api.LeasingPrefix}}}).Register(app)
	}
	leases := app.Group(api.LeasingPrefix+"/v1", a.authenticate(), api.CheckText)
	(&api.API{Nodes: a.Nodes, Ops: a.Portal.Ops, Runbooks: a.Runbooks, Allocations: a.Allocations, Campaigns: a.Campaigns, Wipes: a.Wipes, Ports: a.Ports, Guard: a.Guard, Audit: a.Audit, Log: a.opts.Log,
		Chassis: chassis.New(a.DB, a.Guard), Volume: volume.New(a.DB, a.Guard, a.Nodes),
		DeployTemplates: deploytemplates.New(a.DB, a.Guard),
		InspectionRules: inspectionrules.New(a.DB, a.Guard), FirmwareImages: a.Firmware, BootISOs: a.BootISOs,
		Ramdisk: a.ramdisk(), AgentLimit: ratelimit.New(agentRate, agentBurst), AgentLogs: a.agentLogs(), Leasing: a.Leasing}).Register(app, v1, leases)
	return app
}

// ironicResources are the collections of Ironic's /v1, which Ironic's
// root also serves without the /v1: its bookmark links (href
// <base>/nodes/<uuid>) lead there.
var ironicResources = map[string]bool{
	"nodes": true, "ports": true, "portgroups": true, "chassis": true, "drivers": true, "volume": true,
	"lookup": true, "heartbeat": true, "conductors": true, "allocations": true, "events": true,
	"deploy_templates": true, "shards": true, "continue_inspection": true, "runbooks": true, "inspection_rules": true,
}

// unversioned serves an API client's /nodes/... as /v1/nodes/..., as
// Ironic's root controller routes a path missing its version to v1. The
// portal owns /nodes, /runbooks and /allocations for browsers, so only a
// request that a browser does not send is rerouted: one naming an API
// version, sending JSON, or accepting JSON but not HTML. Under --auth none
// there is no portal and every such path is the API's.
func (a *App) unversioned(c *fiber.Ctx) error {
	p := c.Path()
	first, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if !ironicResources[first] || !(a.opts.AuthNone || apiClient(c)) {
		return c.Next()
	}
	c.Path("/v1" + p)
	// From the first handler again: the routes to match are /v1's now. Only
	// this one has run, and it lets /v1 through.
	return c.RestartRouting()
}

// apiClient tells an API client from a browser, whose navigations accept
// text/html and whose htmx requests accept anything (*/*).
func apiClient(c *fiber.Ctx) bool {
	if c.Get("X-OpenStack-Ironic-API-Version") != "" || c.Get("OpenStack-API-Version") != "" {
		return true
	}
	if strings.HasPrefix(c.Get(fiber.HeaderContentType), fiber.MIMEApplicationJSON) {
		return true
	}
	accept := c.Get(fiber.HeaderAccept)
	return strings.Contains(accept, fiber.MIMEApplicationJSON) && !strings.Contains(accept, fiber.MIMETextHTML)
}

// ramdisk answers agents' lookups, telling them to heartbeat within the
// conductor's agent heartbeat timeout.
func (a *App) ramdisk() *ramdisk.Service {
	r := ramdisk.New(a.DB, a.Guard)
	r.FastTrack = a.opts.Conductor.Agent.FastTrack
	r.APIURL = a.Cond.APIURL
	r.Networks = a.opts.Conductor.Agent.Client.Networks
	r.Discovery = a.opts.Conductor.Agent.Discovery
	r.Media = a.opts.Conductor.Agent.Media
	r.Metrics = ramdisk.NewMetrics(a.Metrics.Registry)
	if t := a.opts.Conductor.Agent.HeartbeatTimeout; t > 0 {
		r.HeartbeatTimeout = int(t.Seconds())
	}
	return r
}

// errorHandler answers a browser outside the API with an HTML page and
// every other client with Ironic's JSON error body.
func (a *App) errorHandler() fiber.ErrorHandler {
	jsonError := api.ErrorHandler(a.opts.Log)
	return func(c *fiber.Ctx, err error) error {
		status, detail := errs.Status(err), err.Error()
		var fe *fiber.Error
		if errors.As(err, &fe) {
			status, detail = fe.Code, fe.Message
			if status == 404 {
				detail = "There is no page at " + c.Path() + "."
			}
		}
		if a.opts.AuthNone || status >= 500 || strings.HasPrefix(c.Path(), "/v1") || !strings.Contains(c.Get(fiber.HeaderAccept), "text/html") {
			return jsonError(c, err)
		}
		return a.Portal.ErrorPage(c, status, detail)
	}
}

// authenticate puts the caller's principal into the request context.
func (a *App) authenticate() fiber.Handler {
	if a.opts.AuthNone {
		return func(c *fiber.Ctx) error {
			c.SetUserContext(policies.WithPrincipal(c.UserContext(), DevPrincipal()))
			return c.Next()
		}
	}
	// The version documents of /v1 and of ESI-Leap's /leasing/v1 are read
	// before a client has a token (version discovery).
	open := []string{"/v1", "/v1/", api.LeasingPrefix + "/v1", api.LeasingPrefix + "/v1/", api.ContinueInspectionPath, api.LookupPath, api.HeartbeatPath, api.HeartbeatBodyPath}
	api := &authn.API{IDs: a.IDs}
	if a.opts.OIDC != nil {
		api.OIDC = a.opts.OIDC
	}
	return api.Require(open...)
}

// loopbackHost refuses, under --auth none, a request whose Host header
// names anything but a loopback address, localhost or the listen name. A
// listener on loopback is not enough: a web page the developer visits can
// point its own name at 127.0.0.1 (DNS rebinding), and the browser then
// sends that name as the Host of requests that would act as system admin.
func (a *App) loopbackHost(c *fiber.Ctx) error {
	host := string(c.Request().Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	ip := net.ParseIP(host)
	if (ip != nil && ip.IsLoopback()) || strings.EqualFold(host, "localhost") || (a.opts.ListenName != "" && strings.EqualFold(host, a.opts.ListenName)) {
		return c.Next()
	}
	return errs.Forbidden("--auth none answers only requests addressed to a loopback address, localhost or the listen name; Host %q is none of these", host)
}

// autoMigrate applies the schema migrations the database lacks, saying
// in the log what it is about to do and each step it applied, so that an
// upgrade leaves a record of what changed the database and when.
func autoMigrate(ctx context.Context, db *store.DB, log *slog.Logger) error {
	from, pending, err := db.Pending(ctx, store.Migrations)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		log.Info("migrating the database schema", "from_version", from, "to_version", from+len(pending), "steps", len(pending))
	}
	start := time.Now()
	applied, err := db.Upgrade(ctx)
	for _, v := range applied {
		log.Info("schema migration applied", "version", v, "name", store.Migrations[v-1].Name)
	}
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		log.Info("database schema migrated", "version", applied[len(applied)-1], "duration", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// DevPrincipal is who every request is under --auth none.
func DevPrincipal() *policies.Principal {
	return &policies.Principal{User: "anonymous-dev", System: true, Roles: policies.ExpandRoles([]string{"admin"})}
}

func (a *App) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := a.DB.Ping(ctx); err != nil {
		return c.Status(503).JSON(fiber.Map{"ready": false, "database": err.Error(), "policy": a.policyStatus()})
	}
	out := fiber.Map{"ready": true, "database": "ok", "policy": a.policyStatus()}
	if a.opts.OIDC != nil {
		// Degraded SSO leaves the server ready: local accounts and API
		// tokens still work, and a restart would not bring the provider.
		out["oidc"] = a.opts.OIDC.Status()
	}
	if note := a.agentNetworksNote(ctx); note != "" {
		out["agent_networks"] = note
	}
	return c.JSON(out)
}

func (a *App) policyStatus() string {
	if s := a.Overrides.Status(); s != "" {
		return s
	}
	return "defaults (overrides disabled)"
}

// Serve serves on ln until ctx ends, then shuts down gracefully: new
// connections are refused and requests in flight get time to finish.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	// Replicas pick up a new override within the 1 s poll.
	a.Overrides.Run(ctx, time.Second)
	go a.idle.Run(ctx)
	actx, stopAudit := context.WithCancel(ctx)
	auditDone := make(chan struct{})
	go func() { a.Audit.Run(actx); close(auditDone) }()
	defer func() { stopAudit(); <-auditDone }()
	if a.Webhook != nil {
		hookDone := make(chan struct{})
		go func() { a.Webhook.Run(actx); close(hookDone) }()
		defer func() { stopAudit(); <-hookDone }()
	}
	if a.Firmware.BaseURL == "" {
		u, err := config.PublicURL("http", ln.Addr().String())
		if err != nil {
			return err
		}
		a.Firmware.BaseURL = u
	}
	if a.BootISOs.BaseURL == "" {
		a.BootISOs.BaseURL = a.Firmware.BaseURL
	}
	if a.Mailer != nil {
		a.Mailer.SetPortalURL(a.Firmware.BaseURL)
		mailDone := make(chan struct{})
		go func() { a.Mailer.Run(actx); close(mailDone) }()
		defer func() { stopAudit(); <-mailDone }()
	}
	if err := a.Cond.Start(ctx, ln.Addr().String()); err != nil {
		return err
	}
	if note := a.agentNetworksNote(ctx); note != "" {
		a.opts.Log.Warn(note)
	}
	// The conductor stops after the last request: its running steps end
	// or fail cleanly and no lock is left behind.
	defer a.Cond.Stop()
	errc := make(chan error, 1)
	go func() { errc <- a.Fiber.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.opts.Log.Info("shutting down")
	if err := a.Fiber.ShutdownWithTimeout(30 * time.Second); err != nil {
		return err
	}
	return nil
}

// Close stores the denials not yet written and releases the database.
func (a *App) Close() error {
	a.Audit.Flush(context.Background())
	return a.DB.Close()
}

// CheckLoopback refuses a listen address that is not loopback; used for
// modes that must never face a network.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("--auth none serves every request as a system admin; it only listens on a loopback address such as 127.0.0.1")
	}
	return nil
}

// agentNetworksNote is the warning a server gives while agents are
// accepted from any address (no --agent-networks) and some node could
// boot one: anyone who can reach the API can then look such a node up,
// heartbeat for it and post its inspection data. "" when neither holds.
// Kept while the nodes are unchanged (their count and last update),
// since /readyz is polled.
type agentNetworksNote struct {
	mu   sync.Mutex
	key  string
	note string
}

const agentNetworksWarning = "no --agent-networks: lookups, heartbeats and inspection data are accepted from any address while nodes can boot the ramdisk agent; see docs/agent-trust.md"

func (a *App) agentNetworksNote(ctx context.Context) string {
	if len(a.opts.Conductor.Agent.Client.Networks) > 0 {
		return ""
	}
	count, err := a.DB.Node.Query().Count(ctx)
	if err != nil {
		return ""
	}
	key := strconv.Itoa(count)
	last, err := a.DB.Node.Query().Where(entnode.UpdatedAtNotNil()).Order(ent.Desc(entnode.FieldUpdatedAt)).Select(entnode.FieldUpdatedAt).First(ctx)
	if err == nil && last.UpdatedAt != nil {
		key += " " + last.UpdatedAt.String()
	}
	a.agentNote.mu.Lock()
	defer a.agentNote.mu.Unlock()
	if a.agentNote.key == key {
		return a.agentNote.note
	}
	note := ""
	for last := 0; note == ""; {
		page, err := a.DB.Node.Query().Where(entnode.IDGT(last)).Order(ent.Asc(entnode.FieldID)).Limit(500).All(ctx)
		if err != nil {
			// Unknown: say nothing now, ask again next time.
			return ""
		}
		if len(page) == 0 {
			break
		}
		for _, n := range page {
			if conductor.HasAgentPath(n, a.opts.Conductor.Agent.Media) {
				note = agentNetworksWarning
				break
			}
		}
		last = page[len(page)-1].ID
	}
	a.agentNote.key, a.agentNote.note = key, note
	return note
}

// proxyStrings spells networks as Fiber's TrustedProxies takes them.
func proxyStrings(nets []net.IPNet) []string {
	out := make([]string, 0, len(nets))
	for _, n := range nets {
		out = append(out, n.String())
	}
	return out
}
