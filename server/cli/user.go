package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/store"
)

// operator is the principal the audit log records for CLI changes: whoever
// can read the database is the system's administrator.
func operator(ctx context.Context) context.Context {
	name := "cli"
	if u, err := user.Current(); err == nil {
		name = "cli:" + u.Username
	}
	return policies.WithPrincipal(ctx, &policies.Principal{User: name, System: true, Roles: policies.ExpandRoles([]string{"admin"}), Method: "cli"})
}

// withAudit opens the database and runs fn as the CLI's operator, with
// the audit log the command's changes are recorded in.
func withAudit(cmd *cobra.Command, g *globals, fn func(ctx context.Context, db *store.DB, a *audit.Log) error) error {
	ctx := operator(cmd.Context())
	db, err := g.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	log, err := g.logger(io.Discard)
	if err != nil {
		return err
	}
	return fn(ctx, db, audit.New(db.Client, log))
}

// withIdentity opens the database and runs fn with the identity service.
func withIdentity(cmd *cobra.Command, g *globals, fn func(ctx context.Context, ids *identity.Service) error) error {
	return withAudit(cmd, g, func(ctx context.Context, db *store.DB, a *audit.Log) error {
		return fn(ctx, identity.New(db, a))
	})
}

func userCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage local accounts and their roles"}
	cmd.AddCommand(userCreateCmd(), userListCmd(), userDeleteCmd(), userSetPasswordCmd(), userRoleCmd(true), userRoleCmd(false))
	return cmd
}

func readPassword(in io.Reader) (string, error) {
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func userCreateCmd() *cobra.Command {
	var g globals
	var stdin bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a user; the password comes from --password-stdin or is generated and printed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				pw, generated := "", !stdin
				if stdin {
					var err error
					if pw, err = readPassword(cmd.InOrStdin()); err != nil {
						return err
					}
				} else {
					pw = identity.GeneratePassword()
				}
				if err := ids.CreateUser(ctx, args[0], pw); err != nil {
					return err
				}
				if generated {
					fmt.Fprintln(cmd.OutOrStdout(), pw)
				}
				return nil
			})
		},
	}
	addGlobals(cmd, &g)
	cmd.Flags().BoolVar(&stdin, "password-stdin", false, "read the password from the first line of standard input")
	return cmd
}

func userSetPasswordCmd() *cobra.Command {
	var g globals
	var stdin bool
	cmd := &cobra.Command{
		Use:   "set-password NAME",
		Short: "Set a user's password from --password-stdin, or generate and print one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				pw := identity.GeneratePassword()
				if stdin {
					var err error
					if pw, err = readPassword(cmd.InOrStdin()); err != nil {
						return err
					}
				}
				if err := ids.SetPassword(ctx, args[0], pw); err != nil {
					return err
				}
				if !stdin {
					fmt.Fprintln(cmd.OutOrStdout(), pw)
				}
				return nil
			})
		},
	}
	addGlobals(cmd, &g)
	cmd.Flags().BoolVar(&stdin, "password-stdin", false, "read the password from the first line of standard input")
	return cmd
}

func userListCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List users and their roles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				us, err := ids.ListUsers(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tROLES\tLAST LOGIN")
				for _, u := range us {
					var rs []string
					for _, a := range u.Roles {
						rs = append(rs, a.Role+"@"+a.Scope.String())
					}
					last := "never"
					if u.LastLogin != nil {
						last = u.LastLogin.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", u.Name, strings.Join(rs, ", "), last)
				}
				return w.Flush()
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

func userDeleteCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a user with its roles and tokens",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				return ids.DeleteUser(ctx, args[0])
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}

// scopeFlags are --project P | --system, shared by grant, revoke and token.
type scopeFlags struct {
	project string
	system  bool
}

func (s *scopeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.project, "project", "", "the project")
	cmd.Flags().BoolVar(&s.system, "system", false, "the system scope")
	cmd.MarkFlagsMutuallyExclusive("project", "system")
	cmd.MarkFlagsOneRequired("project", "system")
}

func (s *scopeFlags) scope() identity.Scope {
	return identity.Scope{System: s.system, Project: s.project}
}

func userRoleCmd(grant bool) *cobra.Command {
	var g globals
	var sf scopeFlags
	var role string
	use, short := "grant NAME", "Give a user a role on a project or the system"
	if !grant {
		use, short = "revoke NAME", "Take a role on a project or the system away from a user"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				a := identity.Assignment{Scope: sf.scope(), Role: role}
				if grant {
					return ids.Grant(ctx, args[0], a)
				}
				return ids.Revoke(ctx, args[0], a)
			})
		},
	}
	addGlobals(cmd, &g)
	sf.add(cmd)
	cmd.Flags().StringVar(&role, "role", "", "admin, manager, member, reader or service")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func tokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Mint, list and revoke API tokens"}
	cmd.AddCommand(tokenCreateCmd(), tokenListCmd(), tokenRevokeCmd())
	return cmd
}

func tokenCreateCmd() *cobra.Command {
	var g globals
	var sf scopeFlags
	var userName, roles, desc string
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Mint an API token; prints only the token, once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				secret, _, err := ids.CreateToken(ctx, identity.TokenRequest{
					User: userName, Scope: sf.scope(), Roles: strings.Split(roles, ","), Expires: expires, Description: desc,
				})
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				return nil
			})
		},
	}
	addGlobals(cmd, &g)
	sf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&userName, "user", "", "the user the token acts as")
	f.StringVar(&roles, "roles", "", "comma-separated roles, each held by the user in the scope")
	f.DurationVar(&expires, "expires", 0, "lifetime such as 24h (default: no expiry)")
	f.StringVar(&desc, "description", "", "what the token is for")
	_ = cmd.MarkFlagRequired("user")
	_ = cmd.MarkFlagRequired("roles")
	return cmd
}

func tokenListCmd() *cobra.Command {
	var g globals
	var userName string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				ts, err := ids.ListTokens(ctx, userName)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "UUID\tUSER\tSCOPE\tROLES\tEXPIRES\tLAST USED\tSTATE")
				when := func(t *time.Time, none string) string {
					if t == nil {
						return none
					}
					return t.UTC().Format(time.RFC3339)
				}
				for _, t := range ts {
					state := "active"
					if t.RevokedAt != nil {
						state = "revoked"
					} else if t.ExpiresAt != nil && time.Now().After(*t.ExpiresAt) {
						state = "expired"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.UUID, t.User, t.Scope, strings.Join(t.Roles, ","),
						when(t.ExpiresAt, "never"), when(t.LastUsedAt, "never"), state)
				}
				return w.Flush()
			})
		},
	}
	addGlobals(cmd, &g)
	cmd.Flags().StringVar(&userName, "user", "", "only this user's tokens")
	return cmd
}

func tokenRevokeCmd() *cobra.Command {
	var g globals
	cmd := &cobra.Command{
		Use:   "revoke UUID",
		Short: "Revoke an API token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withIdentity(cmd, &g, func(ctx context.Context, ids *identity.Service) error {
				return ids.RevokeToken(ctx, args[0], "")
			})
		},
	}
	addGlobals(cmd, &g)
	return cmd
}
