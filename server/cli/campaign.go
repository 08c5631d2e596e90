package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
)

func campaignCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "campaign", Short: "Roll a runbook over many nodes, and follow and steer the campaigns (on the database directly)",
		Long: `Campaigns as POST/GET/PUT /v1/campaigns serve them, acting on the database as
the CLI's operator (a system admin), with every change in the audit log. The
running servers' conductors start the nodes within a second.`}
	cmd.AddCommand(campaignCreateCmd(), campaignListCmd(), campaignShowCmd(),
		campaignStateCmd("pause", campaigns.StatePaused, "Stop starting nodes; the running ones finish"),
		campaignStateCmd("resume", campaigns.StateRunning, "Start nodes again after a pause"),
		campaignStateCmd("cancel", campaigns.StateCancelled, "Skip the nodes not yet started; the running ones finish"),
		campaignApproveCmd())
	return cmd
}

// withCampaigns opens the database and runs fn with the campaign service
// as the CLI's operator. It starts no node: the servers' conductors do.
func withCampaigns(cmd *cobra.Command, g *globals, fn func(ctx context.Context, s *campaigns.Service) error) error {
	enf, err := enforcer()
	if err != nil {
		return err
	}
	return withAudit(cmd, g, func(ctx context.Context, db *store.DB, a *audit.Log) error {
		gd := &guard.Guard{Enforcer: enf, Audit: a}
		return fn(ctx, campaigns.New(db, gd, nodes.New(db, gd), runbooks.New(db, gd), nil))
	})
}

func campaignCreateCmd() *cobra.Command {
	var (
		g        globals
		in       campaigns.Input
		q        campaigns.NodeQuery
		conc     int
		failures string
		after    string
		win      campaigns.Window
		pause    int
	)
	cmd := &cobra.Command{
		Use:   "create NAME RUNBOOK [NODE...]",
		Short: "Create a campaign over the nodes named, or those the --owner/--lessee/--trait… filters pick",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in.Name, in.Runbook, in.Nodes = args[0], args[1], args[2:]
			f := cmd.Flags()
			picked := len(q.Traits) > 0
			for name, p := range map[string]**string{"owner": &q.Owner, "lessee": &q.Lessee, "resource-class": &q.ResourceClass,
				"conductor-group": &q.ConductorGroup, "provision-state": &q.ProvisionState} {
				if f.Changed(name) {
					v, _ := f.GetString(name)
					*p, picked = &v, true
				}
			}
			if picked {
				in.NodeQuery = &q
			}
			if f.Changed("max-concurrency") {
				in.MaxConcurrency = &conc
			}
			if failures != "" {
				in.MaxFailures = failures
			}
			if after != "" {
				in.StartAfter = &after
			}
			if win.From != "" || win.To != "" || len(win.Days) > 0 || win.Timezone != "" {
				in.Window = &win
			}
			if f.Changed("batch-pause") {
				in.BatchPause = &pause
			}
			return withCampaigns(cmd, &g, func(ctx context.Context, s *campaigns.Service) error {
				v, err := s.Create(ctx, &in)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "campaign %s %s: %d node(s) pending, %d skipped\n", v.UUID, v.State, v.Counts.Pending, v.Counts.Skipped)
				return nil
			})
		},
	}
	addGlobals(cmd, &g)
	f := cmd.Flags()
	f.String("owner", "", "pick the nodes of this owner project")
	f.String("lessee", "", "pick the nodes leased to this project")
	f.String("resource-class", "", "pick the nodes of this resource class")
	f.String("conductor-group", "", "pick the nodes of this conductor group")
	f.String("provision-state", "", "pick the nodes in this provision state")
	f.StringSliceVar(&q.Traits, "trait", nil, "pick the nodes carrying this trait (repeat for all of several)")
	f.IntVar(&conc, "max-concurrency", 1, "nodes in progress at once, across every conductor")
	f.StringVar(&failures, "max-failures", "", `failures tolerated: a count ("3") or a share of the nodes ("10%"); default 0`)
	f.StringVar(&after, "start-after", "", "start no node before this RFC 3339 time")
	f.StringSliceVar(&win.Days, "window-days", nil, "days the window opens: mon,tue,… (default every day)")
	f.StringVar(&win.From, "window-from", "", "start nodes only from this time of day (HH:MM)")
	f.StringVar(&win.To, "window-to", "", "until this time of day (HH:MM; earlier than --window-from for overnight)")
	f.StringVar(&win.Timezone, "window-timezone", "", "the window's IANA time zone (default UTC)")
	f.IntVar(&pause, "batch-pause", 0, "run in batches of --max-concurrency with this many seconds between them")
	f.BoolVar(&in.RequiresApproval, "requires-approval", false, "wait for an approval before starting")
	f.BoolVar(&in.SkipIneligible, "skip-ineligible", false, "record nodes that may not take the runbook as skipped instead of refusing")
	return cmd
}

func stampOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func campaignListCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the campaigns, newest first, with their nodes' counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCampaigns(cmd, &g, func(ctx context.Context, s *campaigns.Service) error {
				vs, err := s.List(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "UUID\tNAME\tRUNBOOK\tSTATE\tPENDING\tRUNNING\tSUCCEEDED\tFAILED\tSKIPPED")
				for _, v := range vs {
					k := v.Counts
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", v.UUID, v.Name, v.RunbookName, v.State, k.Pending, k.Running, k.Succeeded, k.Failed, k.Skipped)
				}
				return w.Flush()
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func campaignShowCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "show UUID",
		Short: "Show a campaign and each node's status, batch and reason",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCampaigns(cmd, &g, func(ctx context.Context, s *campaigns.Service) error {
				v, err := s.Get(ctx, args[0])
				if err != nil {
					return err
				}
				rows, err := s.Nodes(ctx, args[0])
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				k := v.Counts
				window := "-"
				if wd := campaigns.WindowOf(v.Campaign); wd != nil {
					window = wd.String()
				}
				for _, kv := range [][2]string{{"uuid", v.UUID}, {"name", v.Name}, {"runbook", v.RunbookName + " (" + v.Runbook + ")"},
					{"state", v.State}, {"created_by", v.CreatedBy}, {"max_concurrency", fmt.Sprint(v.MaxConcurrency)},
					{"max_failures", fmt.Sprint(v.MaxFailures)}, {"window", window}, {"batch_pause", fmt.Sprintf("%ds", v.BatchPause)},
					{"batch", fmt.Sprint(v.Batch)}, {"counts", fmt.Sprintf("pending %d, running %d, succeeded %d, failed %d, skipped %d", k.Pending, k.Running, k.Succeeded, k.Failed, k.Skipped)},
					{"started_at", stampOrDash(v.StartedAt)}, {"finished_at", stampOrDash(v.FinishedAt)}} {
					fmt.Fprintf(w, "%s\t%s\n", kv[0], kv[1])
				}
				for _, a := range v.Approvals {
					by := "awaited"
					if a.ApprovedBy != nil {
						by = "approved by " + *a.ApprovedBy
					}
					fmt.Fprintf(w, "owner approval\t%s: %s\n", a.Project, by)
				}
				fmt.Fprintln(w, "\nNODE\tSTATUS\tBATCH\tSTARTED\tFINISHED\tREASON")
				for _, r := range rows {
					reason := ""
					if r.Reason != nil {
						reason = strings.ReplaceAll(*r.Reason, "\n", " ")
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", r.NodeUUID, r.Status, r.Batch, stampOrDash(r.StartedAt), stampOrDash(r.FinishedAt), reason)
				}
				return w.Flush()
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func campaignStateCmd(use, target, short string) *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   use + " UUID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCampaigns(cmd, &g, func(ctx context.Context, s *campaigns.Service) error {
				if err := s.SetState(ctx, args[0], target); err != nil {
					return err
				}
				return printState(ctx, cmd, s, args[0])
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func campaignApproveCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "approve UUID",
		Short: "Approve a campaign awaiting approval (every approval it awaits: the CLI acts for the system)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCampaigns(cmd, &g, func(ctx context.Context, s *campaigns.Service) error {
				if err := s.Approve(ctx, args[0]); err != nil {
					return err
				}
				return printState(ctx, cmd, s, args[0])
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func printState(ctx context.Context, cmd *cobra.Command, s *campaigns.Service, ident string) error {
	v, err := s.Get(ctx, ident)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "campaign %s %s\n", v.UUID, v.State)
	return nil
}
