package cli

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvilproject/anvil/internal/version"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/acmecert"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/config"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/imagecache"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/leasing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/oidclogin"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/tlscert"
	"github.com/anvilproject/anvil/server/webhook"
	"github.com/anvilproject/anvil/web"
)

func serveCmd() *cobra.Command {
	var (
		g        globals
		listen   string
		auth     string
		demoN    int
		secret   string
		oc       oidclogin.Config
		cc       conductor.Config
		pdir     string
		svcp     string
		penab    bool
		pool     store.Pool
		access   string
		proxy    []net.IPNet
		bmcNet   []string
		agtNet   []string
		imgNet   []string
		conPorts string
		gcPct    int
		fw       firmwareFlags
		isoDir   string
		mtok     string
		profiles bool
		idle     time.Duration
		maxConns int
		tlsCert  string
		tlsKey   string
		tlsPoll  time.Duration
		redirect string
		hsts     time.Duration
		rolAge   time.Duration
		imgFile  string
		maxLease time.Duration
		quota    leasing.Quota
		pwCost   int
		autoMig  bool
		hook     webhook.Config
		smtp     inbox.MailConfig
		eraseAll bool
		acmeCfg  acmecert.Config
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API, the portal and the conductor",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			// GOGC in the environment is the operator's explicit choice and
			// wins over the flag's default.
			if os.Getenv("GOGC") == "" || cmd.Flags().Changed("gc-percent") {
				if gcPct <= 0 {
					return fmt.Errorf("--gc-percent %d: must be more than 0", gcPct)
				}
				debug.SetGCPercent(gcPct)
			}
			if !profiles {
				// Go samples allocations for heap profiles whether or not
				// anyone can read them, into a table of call stacks that
				// grows with each new one sampled (1.6 MB of it after the
				// 10,000-node benchmark's lists, docs/memory.md). Only
				// --pprof serves them.
				runtime.MemProfileRate = 0
			}
			if cc.BMCNetworks, err = bmc.ParseNetworks(bmcNet); err != nil {
				return fmt.Errorf("--bmc-networks: %w", err)
			}
			if cc.Agent.Client.Networks, err = bmc.ParseNetworks(agtNet); err != nil {
				return fmt.Errorf("--agent-networks: %w", err)
			}
			if cc.ImageSourceNetworks, err = bmc.ParseNetworks(imgNet); err != nil {
				return fmt.Errorf("--image-source-networks: %w", err)
			}
			if u := cc.Agent.ImageURL; u != "" {
				if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.RawQuery != "" || pu.Fragment != "" {
					return fmt.Errorf("--agent-image-url %q: give an http:// or https:// base URL such as https://anvil.example.com/images", u)
				}
			}
			if err := checkMedia(cc.Agent.Media); err != nil {
				return err
			}
			if err := identity.ValidPasswordCost(pwCost); err != nil {
				return fmt.Errorf("--password-hash-cost: %w", err)
			}
			if maxLease < 0 || cc.LeaseCheck <= 0 {
				return fmt.Errorf("--allocation-max-lease %s, --lease-check-interval %s: give 0 or more, and more than 0", maxLease, cc.LeaseCheck)
			}
			if quota.MaxNodes < 0 || quota.MaxNodeHours < 0 {
				return fmt.Errorf("--lease-max-nodes %d, --lease-max-node-hours %d: give 0 (no limit) or more", quota.MaxNodes, quota.MaxNodeHours)
			}
			if eraseAll {
				// The deprecated --clean-erase-devices asked for every disk
				// overwritten: the full policy.
				if cmd.Flags().Changed("wipe") && cc.Agent.Wipe != conductor.WipeFull {
					return fmt.Errorf("--clean-erase-devices (deprecated) means --wipe full; it contradicts --wipe %s: drop it", cc.Agent.Wipe)
				}
				log.Warn("--clean-erase-devices is deprecated: use --wipe full")
				cc.Agent.Wipe = conductor.WipeFull
			}
			if !slices.Contains(conductor.WipePolicies, cc.Agent.Wipe) {
				return fmt.Errorf("--wipe %q: give one of %s", cc.Agent.Wipe, strings.Join(conductor.WipePolicies, ", "))
			}
			if cc.Agent.WipePasses < 0 {
				return fmt.Errorf("--wipe-passes %d: give 0 or more", cc.Agent.WipePasses)
			}
			if cc.Agent.ImageCacheMaxBytes <= 0 || cc.Agent.ImageDownloadTimeout <= 0 {
				return fmt.Errorf("--image-cache-max-bytes and --image-download-timeout must be more than 0")
			}
			if err := bmc.CheckCADir(cc.BMCCADir); err != nil {
				return fmt.Errorf("--bmc-ca-dir: %w", err)
			}
			if cc.Console.PortMin, cc.Console.PortMax, err = conductor.ParsePortRange(conPorts); err != nil {
				return fmt.Errorf("--console-port-range %w", err)
			}
			if net.ParseIP(cc.Console.Host) == nil {
				return fmt.Errorf("--console-host %q: give an IP address", cc.Console.Host)
			}
			switch auth {
			case "none":
				if err := server.CheckLoopback(listen); err != nil {
					return err
				}
				log.Warn("authentication is OFF (--auth none): every request acts as a system admin; development only")
			case "local":
			default:
				return fmt.Errorf("--auth %q: use local (accounts and tokens) or none (loopback development mode)", auth)
			}
			if svcp == "" || nodes.ValidateProject("service-project", svcp) != nil {
				return fmt.Errorf("--service-project %q: give a project name without surrounding spaces or control characters", svcp)
			}
			if cc.Group, err = nodes.ValidateConductorGroup("conductor-group", cc.Group); err != nil {
				return fmt.Errorf("--conductor-group: %w", err)
			}
			if err := smtp.Validate(); err != nil {
				return err
			}
			if err := hook.Validate(); err != nil {
				return err
			}
			if (tlsCert == "") != (tlsKey == "") {
				return fmt.Errorf("--tls-cert and --tls-key go together: give both or neither")
			}
			if acmeCfg.Enabled() {
				if tlsCert != "" {
					return fmt.Errorf("--acme-domain and --tls-cert/--tls-key both choose the certificate: give --acme-domain for one from the ACME CA, or --tls-cert and --tls-key for your own files, not both")
				}
				if acmeCfg.CacheDir == "" {
					acmeCfg.CacheDir = config.ACMECacheDir(g.database)
				}
				if err := acmeCfg.Validate(); err != nil {
					return err
				}
			} else {
				// By value, so that the environment and the config file are
				// held to it too.
				for name, set := range map[string]bool{"acme-directory": acmeCfg.Directory != acmecert.DefaultDirectory,
					"acme-email": acmeCfg.Email != "", "acme-cache-dir": acmeCfg.CacheDir != "", "acme-ca": acmeCfg.CAFile != ""} {
					if set {
						return fmt.Errorf("--%s configures ACME: give --acme-domain too", name)
					}
				}
			}
			if redirect != "" && tlsCert == "" && !acmeCfg.Enabled() {
				return fmt.Errorf("--tls-redirect-listen redirects to TLS: give --tls-cert and --tls-key, or --acme-domain, too")
			}
			if tlsPoll <= 0 || hsts < 0 {
				return fmt.Errorf("--tls-reload-interval %s, --hsts-max-age %s: give more than 0, and 0 or more", tlsPoll, hsts)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if rolAge <= 0 || rolAge > web.DefaultRolesMaxAge {
				return fmt.Errorf("--oidc-roles-max-age %s: give more than 0 and at most %s", rolAge, web.DefaultRolesMaxAge)
			}
			var provider *oidclogin.Provider
			if oc.Issuer != "" {
				if auth == "none" {
					return fmt.Errorf("--oidc-issuer needs authentication on; drop --auth none")
				}
				if provider, err = oidclogin.Start(ctx, oc, log); err != nil {
					return err
				}
				log.Info("OpenID Connect sign-in enabled", "issuer", oc.Issuer, "status", provider.Status())
			}
			var images []deployimages.Image
			if imgFile != "" {
				if images, err = deployimages.Load(imgFile); err != nil {
					return fmt.Errorf("--deploy-images: %w", err)
				}
			}
			// Listening first gives the firmware images' URL the real
			// address (the demo's runbook names one) before the app starts.
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			defer ln.Close()
			addr, scheme := ln.Addr().String(), "http"
			// pub is the host and port of the URLs Anvil hands out by
			// default: the listener's, or with ACME the certificate's
			// first name, which is what the certificate is valid for.
			pub := addr
			var acmeMgr *acmecert.Manager
			if tlsCert != "" {
				pair, err := tlscert.Load(tlsCert, tlsKey, log)
				if err != nil {
					return err
				}
				hup := make(chan os.Signal, 1)
				signal.Notify(hup, syscall.SIGHUP)
				defer signal.Stop(hup)
				go pair.Watch(ctx, tlsPoll, hup)
				ln, scheme = tls.NewListener(ln, pair.Config()), "https"
				if redirect != "" {
					if err := redirectToTLS(ctx, redirect, addr, log, nil); err != nil {
						return err
					}
				}
			} else if acmeCfg.Enabled() {
				if acmeMgr, err = acmecert.New(acmeCfg, log); err != nil {
					return err
				}
				ln, scheme = tls.NewListener(ln, acmeMgr.Config()), "https"
				_, port, _ := net.SplitHostPort(addr)
				pub = net.JoinHostPort(acmeCfg.Domains[0], port)
				if redirect != "" {
					// Also answers the CA's HTTP-01 challenges.
					if err := redirectToTLS(ctx, redirect, addr, log, acmeMgr.HTTPHandler); err != nil {
						return err
					}
				}
			} else {
				hsts = 0
			}
			fwo, err := fw.options(g.database, scheme, pub)
			if err != nil {
				return err
			}
			if cc.Agent.ImageURL == "" {
				// The conductor's own default is http://.
				base, err := config.PublicURL(scheme, pub)
				if err != nil {
					return fmt.Errorf("the agents' image URL: %w", err)
				}
				cc.Agent.ImageURL = base + strings.TrimSuffix(imagecache.RoutePrefix, "/")
			}
			if cc.Agent.APIURL, err = agentAPIURL(cc.Agent.APIURL, scheme, pub); err != nil {
				return err
			}
			app, err := server.New(ctx, server.Options{
				Database: g.database, Pool: pool, ManualMigrate: !autoMig, AccessLog: access, AuthNone: auth == "none", ListenName: listenName(listen), Log: log, SessionSecret: secret, OIDC: provider, Conductor: cc, PolicyDir: pdir, PolicyOverrideEnabled: penab, ServiceProject: svcp,
				TrustedProxies: proxy, FirmwareDir: fwo.dir, FirmwareURL: fwo.url, FirmwareMaxBytes: fwo.max,
				BootISODir: isoDir, AllocationMaxLease: maxLease, LeaseQuota: quota, PasswordHashCost: pwCost,
				MetricsToken: mtok, Pprof: profiles, IdleRelease: idle, MaxConnections: maxConns, HSTS: hsts, OIDCRolesMaxAge: rolAge, Webhook: hook, Mail: smtp,
				Bootstrap: func(user, pw string) {
					// Into a file only its owner reads, not the log: a
					// journal or a pod's log keeps what is printed, and
					// more people read it than should sign in as admin.
					f, err := writeBootstrap(g.database, pw)
					if err != nil {
						log.Error("could not keep the first admin's password; set one with anvil user set-password", "user", user, "err", err)
						return
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "\n  First start: created system admin %q; its one-time password is in %s (readable by this user only).\n"+
						"  It only signs in to the portal, which asks for a new one; the API refuses it until then.\n"+
						"  Or set one with: anvil user set-password %s --password-stdin. Then delete the file.\n\n", user, f, user)
				},
			})
			if err != nil {
				return err
			}
			defer app.Close()
			if demoN > 0 {
				n, err := demo.Seed(ctx, app.DB, app.Firmware, demoN)
				if err != nil {
					return fmt.Errorf("--demo: %w", err)
				}
				log.Info("demo nodes enrolled", "created", n)
				if imgFile == "" {
					// Something for the Deploy panel to offer.
					if images, err = demo.DeployImages(app.Firmware); err != nil {
						return fmt.Errorf("--demo: %w", err)
					}
				}
			}
			app.Portal.DeployImages = images
			v := version.Get()
			log.Info("anvil serving", "listen", scheme+"://"+addr, "database", store.Redacted(g.database), "version", v.Version, "commit", v.Commit)
			if acmeMgr != nil {
				// Now that the listener is about to answer the CA's
				// TLS-ALPN-01 challenge.
				log.Info("obtaining the TLS certificate by ACME", "domains", strings.Join(acmeCfg.Domains, ","), "directory", acmeCfg.Directory, "cache", acmeCfg.CacheDir)
				go acmeMgr.Obtain(ctx)
			}
			return app.Serve(ctx, ln)
		},
	}
	addGlobals(cmd, &g)
	f := cmd.Flags()
	f.BoolVar(&autoMig, "auto-migrate", true, "apply pending schema migrations at start; false refuses to start until anvil db upgrade has run (a database a newer anvil upgraded is refused either way)")
	f.StringVar(&listen, "listen", "127.0.0.1:6385", "address to listen on")
	f.StringVar(&auth, "auth", "local", "authentication: local (accounts and tokens; OIDC when configured) or none (loopback-only development mode)")
	f.IntVar(&demoN, "demo", 0, "enrol this many fake-driver demo nodes over a handful of owner and lessee projects (skipped if nodes exist)")
	f.StringVar(&oc.Issuer, "oidc-issuer", "", "OpenID Connect issuer URL; enables \"Sign in with SSO\" and bearer JWTs")
	f.StringVar(&oc.ClientID, "oidc-client-id", "", "OpenID Connect client id (also the audience bearer JWTs must carry)")
	f.StringVar(&oc.ClientSecret, "oidc-client-secret", "", "OpenID Connect client secret")
	f.StringVar(&oc.RedirectURL, "oidc-redirect-url", "", "this portal's callback, e.g. https://anvil.example.com/auth/oidc/callback")
	f.StringVar(&oc.UserClaim, "oidc-user-claim", "preferred_username", "claim naming the user (falls back to sub)")
	f.StringVar(&oc.GroupsClaim, "oidc-groups-claim", "groups", "claim listing anvil:system:<role> and anvil:project:<id>:<role> entries")
	f.DurationVar(&rolAge, "oidc-roles-max-age", web.DefaultRolesMaxAge, "how long an SSO portal session acts on the roles its provider gave before refreshing them there (at most the default)")
	f.StringVar(&cc.Name, "conductor-name", "", "this conductor's name in locks and heartbeats (default host@listen-address; keep it stable across restarts)")
	f.StringVar(&cc.Group, "conductor-group", "", "the conductor_group whose nodes this conductor serves (Ironic's; the default \"\" serves nodes without a group)")
	f.DurationVar(&cc.Heartbeat, "heartbeat", 5*time.Second, "how often the conductor reports it is alive")
	f.DurationVar(&cc.HeartbeatTimeout, "heartbeat-timeout", 30*time.Second, "silence after which another conductor takes a conductor's nodes over")
	f.IntVar(&pwCost, "password-hash-cost", bcrypt.DefaultCost, "bcrypt cost of the password hashes local accounts get when created or changed (Keystone's password_hash_rounds; each step doubles a login's CPU); existing hashes keep theirs")
	f.DurationVar(&maxLease, "allocation-max-lease", 0, "longest lease a project-scoped caller may give an allocation: it must set extra.anvil_expires_at within this of now, and may not remove it (0: no cap; system-scoped callers are never capped)")
	f.DurationVar(&cc.LeaseCheck, "lease-check-interval", 30*time.Second, "how often the conductor ends the allocation leases past their extra.anvil_expires_at, and starts and ends leases (/leasing) whose time came")
	f.IntVar(&quota.MaxNodes, "lease-max-nodes", 0, "most nodes one project may hold in leases (/leasing) at once; a claim beyond is refused with the numbers (0: no limit)")
	f.IntVar(&quota.MaxNodeHours, "lease-max-node-hours", 0, "most node-hours one project's leases (/leasing) may cover in a calendar month (UTC); a claim beyond is refused with the numbers (0: no limit)")
	f.DurationVar(&cc.PowerSync, "power-sync", time.Minute, "period of the power-state sync over every node (0 turns it off)")
	f.IntVar(&cc.PowerSyncWorkers, "power-sync-workers", 16, "concurrent BMC calls during power sync")
	f.DurationVar(&cc.BMC.Timeout, "bmc-timeout", 20*time.Second, "timeout of each BMC call")
	f.DurationVar(&cc.PowerTimeout, "power-timeout", time.Minute, "how long a power action waits for the BMC to report the new state (Ironic's power_timeout)")
	f.DurationVar(&cc.BMCResetTimeout, "bmc-reset-timeout", 5*time.Minute, "how long reset_bmc waits for the restarted BMC to answer again before the step fails")
	f.DurationVar(&cc.FirmwareUnresponsiveBMCWait, "firmware-unresponsive-bmc-wait", 8*time.Minute, "how long firmware.update waits out a BMC that does not answer while and after it flashes before the step fails (Ironic's firmware_update_resource_validation_timeout)")
	f.StringSliceVar(&bmcNet, "bmc-networks", nil, "CIDRs BMC addresses must fall in, checked at enrolment and at every connection (empty: any address)")
	f.StringVar(&cc.Console.Host, "console-host", "127.0.0.1", "address the ipmitool-socat consoles listen on and their tcp:// URLs name (Ironic's [console]socat_address); with replicas, one the others reach, since the portal of any replica connects there")
	f.StringVar(&conPorts, "console-port-range", "", "ports the ipmitool-socat consoles of nodes without driver_info/ipmi_terminal_port take, as <start>:<end> (Ironic's [console]port_range; empty: none)")
	f.StringVar(&cc.BMCCADir, "bmc-ca-dir", "", "the only directory whose files driver_info/redfish_verify_ca may name, set by system-scope callers only (empty: no path; everyone may give true, false or an inline PEM bundle)")
	f.DurationVar(&cc.Agent.BootTimeout, "agent-boot-timeout", 30*time.Minute, "how long a machine booted into the ramdisk agent has to call back (Ironic's deploy_callback_timeout)")
	f.DurationVar(&cc.Agent.InspectWaitTimeout, "inspect-wait-timeout", 30*time.Minute, "how long an in-band inspection waits in inspect wait for the agent's inventory, heartbeats or not, before it ends in inspect failed (Ironic's [conductor]inspect_wait_timeout)")
	f.DurationVar(&cc.Agent.HeartbeatTimeout, "agent-heartbeat-timeout", 5*time.Minute, "how long a running ramdisk agent may stay silent before its step fails; agents are told to heartbeat well within it (Ironic's ramdisk_heartbeat_timeout)")
	f.StringVar(&cc.Agent.LogDir, "agent-log-dir", "", `directory that keeps the ramdisk agent's logs of every failed run, one .tar.gz each, readable by system readers at /v1/nodes/{node}/agent_logs (default: "agent-logs" beside the SQLite database file, or in the working directory with PostgreSQL)`)
	f.IntVar(&cc.Agent.LogMaxPerNode, "agent-log-max-per-node", agentlogs.DefaultMaxPerNode, "agent logs kept per node, the newest")
	f.DurationVar(&cc.Agent.LogMaxAge, "agent-log-max-age", agentlogs.DefaultMaxAge, "agent logs older than this are removed")
	f.Int64Var(&cc.Agent.LogMaxBytes, "agent-log-max-bytes", agentlogs.DefaultMaxBytes, "most bytes all agent logs together keep; beyond it the oldest are removed")
	f.StringSliceVar(&agtNet, "agent-networks", nil, "CIDRs ramdisk agents call from: lookups, heartbeats, inspection data and iPXE scripts from elsewhere are refused, and the conductor sends commands to no other address (empty: any, development only; see docs/agent-trust.md)")
	f.BoolVar(&cc.Agent.TokenOnMedia, "agent-token-on-media", true, "put each boot's agent token on the kernel line of the media Anvil writes (the ISOs it builds, its iPXE scripts) so that no lookup issues it (Ironic's agent_secret_token_pregenerated); false when the machines' network boot does not use Anvil's iPXE scripts")
	f.BoolVar(&cc.Agent.Discovery, "inspection-discovery", false, "accept inspection data without the node's agent token, matching the node by MAC or BMC address as Ironic does (for agents booted from an operator's deploy_iso); anyone on the agent networks can then rewrite a waiting node's inventory")
	f.BoolVar(&cc.Agent.FastTrack, "fast-track", false, "leave the ramdisk agent running after cleaning, powered on, so a deploy that follows within the agent heartbeat timeout skips the reboot (Ironic's [deploy]fast_track)")
	f.StringVar(&cc.Agent.APIURL, "agent-api-url", "", "Anvil's API URL as ramdisk agents reach it, which the ISOs Anvil builds pass them as ipa-api-url, e.g. https://anvil.example.com:6385 (default: http:// and the listen address, https:// with --tls-cert, the host name for a wildcard address; with --acme-domain, https:// and its first name)")
	f.StringVar(&isoDir, "boot-iso-dir", "", `directory of the agent ISOs Anvil builds for redfish-virtual-media nodes with deploy_kernel and deploy_ramdisk, each served to its BMC at --firmware-url/boot-iso/ for one boot (default: "boot-iso" beside the SQLite database file, or in the working directory with PostgreSQL)`)
	for _, m := range []struct {
		v         *string
		name, use string
	}{
		{&cc.Agent.Media.Bootloader, "bootloader", "EFI system partition image (GRUB) of the agent ISOs Anvil builds for UEFI nodes whose driver_info has no bootloader (Ironic's [conductor]bootloader)"},
		{&cc.Agent.Media.DeployKernel, "deploy-kernel", "agent kernel of nodes whose driver_info gives neither deploy_kernel nor deploy_ramdisk (Ironic's [conductor]deploy_kernel)"},
		{&cc.Agent.Media.DeployRamdisk, "deploy-ramdisk", "agent ramdisk of nodes whose driver_info gives neither deploy_kernel nor deploy_ramdisk (Ironic's [conductor]deploy_ramdisk)"},
		{&cc.Agent.Media.RescueKernel, "rescue-kernel", "rescue kernel of nodes whose driver_info gives neither rescue_kernel nor rescue_ramdisk (Ironic's [conductor]rescue_kernel; unset: rescue boots the deploy kernel)"},
		{&cc.Agent.Media.RescueRamdisk, "rescue-ramdisk", "rescue ramdisk of nodes whose driver_info gives neither rescue_kernel nor rescue_ramdisk (Ironic's [conductor]rescue_ramdisk)"},
	} {
		f.StringVar(m.v, m.name, "", "http(s) URL of the "+m.use)
	}
	f.StringVar(&cc.Agent.ImageURL, "agent-image-url", "", "base URL ramdisk agents fetch images from for image_download_source=local, each deploy's at <url>/<random token> (default: http:// and the listen address, https:// with --tls-cert, with --acme-domain https:// and its first name, then /images)")
	f.StringVar(&cc.Agent.ImageCacheDir, "image-cache-dir", "", `directory of the images Anvil downloads for image_download_source=local, kept under their checksums (default: "image-cache" beside the SQLite database file, or in the working directory with PostgreSQL)`)
	f.StringSliceVar(&imgNet, "image-source-networks", nil, "CIDRs of the only networks Anvil fetches from for a tenant: instance_info.image_source (its HEAD check and the image cache) and driver_info's deploy_kernel, deploy_ramdisk and bootloader, each address checked as it connects, redirects included (empty: anywhere but loopback, link-local, the --bmc-networks and --agent-networks and this server's own addresses; see docs/security.md)")
	f.Int64Var(&cc.Agent.ImageCacheMaxBytes, "image-cache-max-bytes", imagecache.DefaultMaxBytes, "most bytes the image cache keeps (and so the largest image); beyond it images not being served are removed, the least recently used of the project holding the most bytes first, so one project cannot evict another's images by filling the cache")
	f.DurationVar(&cc.Agent.ImageDownloadTimeout, "image-download-timeout", imagecache.DefaultTimeout, "how long one download into the image cache may take")
	f.StringVar(&cc.Agent.Wipe, "wipe", conductor.WipeExpress, "how deep automated cleaning wipes the disks between tenants: express (NVMe format, ATA secure erase, else a full overwrite), full (every byte overwritten) or metadata (partition tables only; data stays); a node's driver_info/anvil_wipe, set by system scope, overrides it")
	f.IntVar(&cc.Agent.WipePasses, "wipe-passes", 1, "passes of random data a full overwrite writes before its pass of zeros (Ironic's [deploy]erase_devices_iterations); 0 writes zeros only")
	f.BoolVar(&eraseAll, "clean-erase-devices", false, "deprecated: --wipe full")
	_ = f.MarkDeprecated("clean-erase-devices", "use --wipe full")
	f.StringVar(&pdir, "policy-dir", "policy.d", "directory of policy override files (Ironic's YAML policy format)")
	f.BoolVar(&penab, "policy-override-enabled", false, "apply policy overrides from --policy-dir and uploads; off means the defaults, whatever the directory holds")
	f.StringVar(&svcp, "service-project", policies.DefaultServiceProject, "elevated service project: its service-role users act as system members and readers (Ironic's service_project_name)")
	f.StringVar(&secret, "session-secret", "", "secret the portal's cookie keys derive from (give every replica the same); default: generated once and kept in the database")
	f.StringVar(&access, "access-log", "on", "request log lines: on, off, or a sample rate such as 0.1 (server errors are always logged)")
	f.IntVar(&pool.MaxOpen, "db-max-open", 0, "most open database connections (0: 32 on PostgreSQL, 8 on SQLite)")
	f.IntVar(&pool.MaxIdle, "db-max-idle", 0, "most idle database connections kept for reuse (0: as many as --db-max-open)")
	f.DurationVar(&pool.MaxLifetime, "db-conn-max-lifetime", 0, "close database connections older than this (0: never), e.g. to follow a failover behind a proxy")
	// Go's own target. 400 was the default while a detailed page of 1,000
	// nodes allocated 10 MB against a live heap of 5-7 MB; with both
	// smaller, 400 ran the 10,000-node benchmark's lists no faster side by
	// side and held 20-28 MiB more (docs/memory.md, issue 47).
	f.IntVar(&gcPct, "gc-percent", 100, "Go garbage collector target (GOGC): heap growth over the live heap before a collection; more trades memory for CPU (GOGC in the environment wins unless this is given)")
	fw.add(f)
	f.StringVar(&imgFile, "deploy-images", "", `JSON file of the images the portal's Deploy panel offers, a list of {"name", "url", "checksum", "ssh_user"} (checksum "sha256:<hex>", or another of md5, sha1, sha384, sha512; or a bare hex digest; ssh_user, optional, the login the image gives the deployer's SSH keys, for the SSH command the portal shows); read at start (empty: tenants give an image's URL themselves; with --demo, a demo image)`)
	f.IPNetSliceVar(&proxy, "trusted-proxies", nil, "reverse proxies (CIDRs, comma-separated) whose X-Forwarded-For names the client's address, and X-Forwarded-Proto and X-Forwarded-Host the scheme and host of the URLs Anvil hands out (links, next markers, Location, the portal cookie's Secure flag); default none: the peer is the client and the connection says the scheme")
	f.StringVar(&mtok, "metrics-token", "", "bearer token /metrics requires (Authorization: Bearer <token>); default none: /metrics answers loopback scrapers only")
	f.DurationVar(&idle, "idle-release", 10*time.Second, "after this long without a request, hand the heap's free headroom back to the operating system (0: leave it to Go's scavenger)")
	f.IntVar(&maxConns, "max-connections", server.DefaultMaxConnections, "most client connections open at once, idle kept-alive ones included (each holds about 8 KiB of buffers); past it a new connection gets a 503: raise it for more agents or clients that keep their connections open")
	f.StringVar(&tlsCert, "tls-cert", "", "PEM certificate (with its chain) to serve HTTPS with, instead of HTTP; reloaded on SIGHUP and when the file changes, without a restart")
	f.StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.DurationVar(&tlsPoll, "tls-reload-interval", tlscert.DefaultPoll, "how often --tls-cert and --tls-key are read for a renewed pair")
	f.StringVar(&redirect, "tls-redirect-listen", "", "also listen on this address for plain HTTP and redirect every request to the HTTPS address (e.g. :80); empty: none")
	f.StringSliceVar(&acmeCfg.Domains, "acme-domain", nil, "DNS names (repeat the flag or separate by commas) to serve HTTPS for with certificates obtained and renewed from an ACME CA (Let's Encrypt by default), validated by TLS-ALPN-01 on --listen (the CA must reach it on port 443) or HTTP-01 on --tls-redirect-listen (port 80); instead of --tls-cert and --tls-key; the first name is the host of the URLs Anvil hands out by default")
	f.StringVar(&acmeCfg.Directory, "acme-directory", acmecert.DefaultDirectory, "the ACME CA's directory URL, for --acme-domain (e.g. Let's Encrypt's staging directory, or a private CA's)")
	f.StringVar(&acmeCfg.Email, "acme-email", "", "contact address the ACME account registers, for the CA's expiry and policy notices (empty: none)")
	f.StringVar(&acmeCfg.CacheDir, "acme-cache-dir", "", `directory keeping the ACME account key and the certificates, so a restart does not ask the CA again; private keys, kept 0700 (default: "acme" beside the SQLite database file, or in the working directory with PostgreSQL)`)
	f.StringVar(&acmeCfg.CAFile, "acme-ca", "", "PEM bundle of the CAs that sign --acme-directory's own HTTPS certificate, trusted instead of the system's (for a private ACME CA)")
	f.DurationVar(&hsts, "hsts-max-age", 365*24*time.Hour, "with --tls-cert or --acme-domain, the max-age of the Strict-Transport-Security header on every answer (0: no header)")
	f.BoolVar(&profiles, "pprof", false, "serve Go's runtime profiles (heap, goroutines, CPU) at /debug/pprof/, to the same callers as /metrics")
	f.StringVar(&hook.URL, "webhook-url", "", "http:// or https:// URL that receives the audit events --webhook-rules choose, as signed JSON POSTs (empty: none sent)")
	f.StringVar(&hook.Secret, "webhook-secret", "", "secret keying each delivery's X-Anvil-Signature (HMAC-SHA256 of the body); required with --webhook-url")
	f.StringSliceVar(&hook.Rules, "webhook-rules", webhook.DefaultRules, "audit rules sent to --webhook-url: names, or prefixes ending in * (of "+conductor.RuleRecover+" only the owner notifications are sent)")
	f.StringVar(&smtp.Addr, "smtp-addr", "", "host:port of the SMTP relay that mails inbox notices to the addresses each project sets in the portal (STARTTLS when the relay offers it; empty: no mail)")
	f.StringVar(&smtp.From, "smtp-from", "", "sender address of inbox mail; required with --smtp-addr")
	f.StringVar(&smtp.User, "smtp-user", "", "user name for the relay's PLAIN authentication, sent only over TLS or to a relay on this host")
	f.StringVar(&smtp.Password, "smtp-password", "", "password for --smtp-user (prefer the ANVIL_SMTP_PASSWORD environment variable)")
	f.StringVar(&smtp.PortalURL, "smtp-portal-url", "", "the portal's address as people reach it, for links in mail (default: the listener's)")
	return cmd
}

// agentAPIURL settles --agent-api-url for a server listening on listen.
func agentAPIURL(flag, scheme, listen string) (string, error) {
	v := flag
	if v == "" {
		var err error
		if v, err = config.PublicURL(scheme, listen); err != nil {
			return "", fmt.Errorf("--agent-api-url: %w", err)
		}
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("--agent-api-url %q: give an http:// or https:// URL such as https://anvil.example.com:6385", flag)
	}
	return strings.TrimRight(v, "/"), nil
}

// checkMedia refuses default boot media that are not http(s) URLs (all
// Anvil downloads or iPXE fetches), and a kernel without its ramdisk.
func checkMedia(m ramdisk.Media) error {
	vals := map[string]string{"bootloader": m.Bootloader, "deploy-kernel": m.DeployKernel, "deploy-ramdisk": m.DeployRamdisk,
		"rescue-kernel": m.RescueKernel, "rescue-ramdisk": m.RescueRamdisk}
	for _, name := range []string{"bootloader", "deploy-kernel", "deploy-ramdisk", "rescue-kernel", "rescue-ramdisk"} {
		v := vals[name]
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(v, " \t\r\n") {
			return fmt.Errorf("--%s %q: give an http:// or https:// URL", name, v)
		}
	}
	for _, p := range [][2]string{{"deploy-kernel", "deploy-ramdisk"}, {"rescue-kernel", "rescue-ramdisk"}} {
		if (vals[p[0]] == "") != (vals[p[1]] == "") {
			return fmt.Errorf("--%s and --%s: give both or neither", p[0], p[1])
		}
	}
	return nil
}

// listenName is the host part of a listen address ("" when it has none).
func listenName(listen string) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	return host
}

// BootstrapFile is the name of the file holding the first admin's
// generated password, in the state directory: beside a SQLite database,
// else the working directory.
const BootstrapFile = "bootstrap-admin-password"

// writeBootstrap writes pw to a new 0600 BootstrapFile and returns its
// path; an existing file (from an earlier database) is not overwritten.
func writeBootstrap(database, pw string) (string, error) {
	dir := "."
	if f, ok := store.SQLiteFile(database); ok {
		dir = filepath.Dir(f)
	}
	path, err := filepath.Abs(filepath.Join(dir, BootstrapFile))
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(pw + "\n"); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}
