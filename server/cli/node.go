package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/server/nodes"
)

func nodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Node operations that act on the database directly"}
	cmd.AddCommand(nodeImportCmd())
	return cmd
}

func nodeImportCmd() *cobra.Command {
	var (
		g      globals
		format string
	)
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Enrol nodes from a CSV or JSON file, all or nothing",
		Long: `Enrol nodes from FILE ("-" for standard input). JSON: a list of node objects
(the API's create body plus "traits"), or {"nodes": [...]}. CSV: a header row
with uuid, name, driver, owner, lessee, resource_class, description, traits
(;-separated) and driver_info.KEY / properties.KEY / extra.KEY columns.
Every problem is reported with its line; if there is any, nothing is enrolled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := os.Stdin
			if args[0] != "-" {
				var err error
				if f, err = os.Open(args[0]); err != nil {
					return err
				}
				defer f.Close()
			}
			if format == "" && strings.HasSuffix(strings.ToLower(args[0]), ".json") {
				format = "json"
			}
			recs, err := nodes.ParseImport(f, format)
			if err != nil {
				return importFailure(cmd, err)
			}
			db, err := g.open(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			if err := nodes.Import(cmd.Context(), db, recs); err != nil {
				return importFailure(cmd, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrolled %d nodes\n", len(recs))
			return nil
		},
	}
	addGlobals(cmd, &g)
	cmd.Flags().StringVar(&format, "format", "", "csv or json (default: from the file's name or content)")
	return cmd
}

func importFailure(cmd *cobra.Command, err error) error {
	var ie nodes.ImportErrors
	if errors.As(err, &ie) {
		fmt.Fprintln(cmd.ErrOrStderr(), ie.Error())
		return fmt.Errorf("%d problem(s) found; nothing was enrolled", len(ie))
	}
	return fmt.Errorf("nothing was enrolled: %w", err)
}
