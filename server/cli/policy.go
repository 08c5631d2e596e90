package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/override"
)

func policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Inspect the policy rules: list, sample file, persona matrix"}
	cmd.AddCommand(policyListCmd(), policySampleCmd(), policyCheckCmd(), policyValidateCmd(), policyApplyCmd(), policyStatusCmd())
	return cmd
}

// enforcer builds the policy in force for the CLI.
func enforcer() (*policies.Enforcer, error) { return policies.New(policies.Defaults(), nil) }

func policyListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every rule with its check string, default and scope types",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := enforcer()
			if err != nil {
				return err
			}
			defaults := map[string]string{}
			for _, r := range policies.Defaults() {
				defaults[r.Name] = r.Check
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "RULE\tSCOPE\tCHECK\tDEFAULT")
			for _, r := range e.Rules() {
				scope := strings.Join(r.Scopes, ",")
				if scope == "" {
					scope = "(base)"
				}
				def := "yes"
				if r.Check != defaults[r.Name] {
					def = "overridden; default " + defaults[r.Name]
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Name, scope, r.Check, def)
			}
			return w.Flush()
		},
	}
}

func policySampleCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sample",
		Short: "Print a commented policy file with every rule at its default",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), policies.Sample(policies.Defaults()))
			return err
		},
	}
}

func policyCheckCmd() *cobra.Command {
	var personas []string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Print the persona × rule matrix (allowed/denied) against a node owned by owner-project and leased to lessee-project",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := policies.SelectPersonas(personas)
			if err != nil {
				return err
			}
			e, err := enforcer()
			if err != nil {
				return err
			}
			rules, allowed, err := e.Matrix(ps)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 1, ' ', 0)
			fmt.Fprint(w, "RULE")
			for _, p := range ps {
				fmt.Fprint(w, "\t"+p.Name)
			}
			fmt.Fprintln(w)
			for i, r := range rules {
				fmt.Fprint(w, r)
				for _, ok := range allowed[i] {
					if ok {
						fmt.Fprint(w, "\tallow")
					} else {
						fmt.Fprint(w, "\t-")
					}
				}
				fmt.Fprintln(w)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&personas, "persona", nil, "personas to show (repeat or comma-separate); default all: "+strings.Join(policies.PersonaNames(), ", "))
	return cmd
}

// readOverride reads a zip or a policy.d directory.
func readOverride(path string) (override.Files, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return override.ReadDir(path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return override.ReadZip(b)
}

func policyValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE.zip|DIR",
		Short: "Validate an override offline, exactly as an upload is validated, and print its diff from the defaults with widenings marked; non-zero exit with the reasons",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := readOverride(args[0])
			if err != nil {
				return err
			}
			rules, err := override.Rules(files)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "valid: %d file(s), %d rule(s) overridden: %s\n", len(files), len(rules), strings.Join(files.Names(), ", "))
			// The dry run's diff against the defaults, widenings marked.
			for _, d := range override.Diff(map[string]string{}, rules) {
				fmt.Fprintln(out, "  "+d)
			}
			return nil
		},
	}
}

func policyApplyCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "apply FILE.zip",
		Short: "Validate and store an override; every running replica applies it within 2 seconds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := operator(cmd.Context())
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			db, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			files, err := override.ReadZip(b)
			if err != nil {
				return err
			}
			who := policies.PrincipalFrom(ctx).User
			rev, err := override.Apply(ctx, db, audit.New(db.Client, log), files, who)
			if err != nil {
				return fmt.Errorf("refused; the policy in force is unchanged: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored as revision %d: %s\n", rev, strings.Join(files.Names(), ", "))
			return nil
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func policyStatusCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the stored override's state: PO: … or PO (broken): …",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.open(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := override.StoredStatus(cmd.Context(), db)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), st)
			return nil
		},
	}
	addGlobals(cmd, &g)
	return cmd
}
