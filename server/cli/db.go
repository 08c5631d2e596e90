package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/server/store"
)

func dbCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "db", Short: "Back up and check the database"}
	cmd.AddCommand(dbBackupCmd(), dbCheckCmd())
	return cmd
}

func dbBackupCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent copy of a SQLite database to FILE, safe while anvil serves (PostgreSQL: use pg_dump)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Not migrated: a backup copies the database as it is.
			db, err := store.OpenExisting(cmd.Context(), g.database)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := db.Backup(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s\n", store.Redacted(g.database), args[0])
			return nil
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func dbCheckCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the database answers, is intact (SQLite integrity_check) and has every table and column; exits 1 if not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.OpenExisting(cmd.Context(), g.database)
			if err != nil {
				return err
			}
			defer db.Close()
			problems, err := db.Check(cmd.Context())
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				return errors.New("database " + store.Redacted(g.database) + " has problems:\n  " + strings.Join(problems, "\n  "))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "database %s: ok (%s, intact, schema current)\n", store.Redacted(g.database), db.Dialect)
			return nil
		},
	}
	addGlobals(cmd, &g)
	return cmd
}
