package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/server/store"
)

func dbCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "db", Short: "Back up, check and upgrade the database"}
	cmd.AddCommand(dbInitCmd(), dbBackupCmd(), dbCheckCmd(), dbUpgradeCmd())
	return cmd
}

// dbInitCmd creates a database, which the other operator commands
// refuse to do (serve does it too, on first start).
func dbInitCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the database (a SQLite file or the tables of an empty PostgreSQL database) at this anvil's schema; the other operator commands never create one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.Open(cmd.Context(), g.database)
			if err != nil {
				return err
			}
			defer db.Close()
			had, err := db.HasSchema(cmd.Context())
			if err != nil {
				return err
			}
			if err := db.Migrate(cmd.Context()); err != nil {
				return err
			}
			name := store.Redacted(g.database)
			if had {
				fmt.Fprintf(cmd.OutOrStdout(), "database %s exists; brought up to date\n", name)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created database %s\n", name)
			return nil
		},
	}
	addGlobals(cmd, &g)
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
		Short: "Check the database answers, is intact (SQLite integrity_check), is at this anvil's schema version and has every table, column and index its migrations make and no index they do not; exits 1 if not",
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
			fmt.Fprintf(cmd.OutOrStdout(), "database %s: ok (%s, intact, schema version %d, current)\n", store.Redacted(g.database), db.Dialect, len(store.Migrations))
			return nil
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func dbUpgradeCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Apply the schema migrations the database lacks (serve does too, unless --auto-migrate=false); never drops data, refuses a database a newer anvil upgraded",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Open, not OpenExisting: upgrading a new SQLite path
			// creates the database, as serve does.
			db, err := store.Open(cmd.Context(), g.database)
			if err != nil {
				return err
			}
			defer db.Close()
			from, err := db.Version(cmd.Context())
			if err != nil {
				return err
			}
			applied, err := db.Upgrade(cmd.Context())
			out := cmd.OutOrStdout()
			for _, v := range applied {
				fmt.Fprintf(out, "applied migration %d: %s\n", v, store.Migrations[v-1].Name)
			}
			if err != nil {
				return err
			}
			name := store.Redacted(g.database)
			if len(applied) == 0 {
				fmt.Fprintf(out, "database %s is at schema version %d: up to date, nothing to do\n", name, from)
				return nil
			}
			fmt.Fprintf(out, "database %s upgraded from schema version %d to %d\n", name, from, applied[len(applied)-1])
			return nil
		},
	}
	addGlobals(cmd, &g)
	return cmd
}
