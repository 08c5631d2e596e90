package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/policies"
)

func policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Inspect the policy rules: list, sample file, persona matrix"}
	cmd.AddCommand(policyListCmd(), policySampleCmd(), policyCheckCmd())
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
