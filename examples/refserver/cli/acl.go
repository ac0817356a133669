package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

// aclCommands are the "acl" group, for a server started with -acl.
func (e *env) aclCommands() []subcommand {
	return []subcommand{
		{"bootstrap", "make the cluster's first management token, once, and print it", e.aclBootstrap},
		{"create", "make a token for namespaces and permissions, and print it", e.aclCreate},
		{"list", "list the tokens' names and policies (never a secret)", e.aclList},
		{"delete", "revoke a token on every server", e.aclDelete},
	}
}

func (e *env) aclBootstrap(ctx context.Context, args []string) int {
	c := e.newCommand("acl bootstrap", "", "Makes the first management token of a server (or cluster) started with -acl and prints its secret, "+
		"which the server keeps only as a hash: this is the one time it is shown. Refused once any token exists, on every server. "+
		"Pass the token to the other commands with -token or $"+TokenEnv+".",
		"export "+TokenEnv+"=$(refserver acl bootstrap -quiet)")
	quiet := c.fs.Bool("quiet", false, "print the secret alone, for a shell variable")
	code := ExitOK
	if !c.parse(args, 0, 0, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	tok, err := retry(ctx, c, cl.BootstrapACL)
	if err != nil {
		return c.fail(err)
	}
	return c.printToken(tok, *quiet)
}

func (e *env) aclCreate(ctx context.Context, args []string) int {
	c := e.newCommand("acl create", "NAME", "Makes the token NAME (or replaces its secret and policy) with the permissions given, in the namespaces given, "+
		"and prints its secret once. Permissions: "+permissionNames()+". It needs a management (operator) token.",
		"refserver acl create -namespace team-a -permission volume-read,volume-claim team-a")
	var ns, perms listFlag
	c.fs.Var(&ns, "namespace", "a namespace the token may act in, repeatable or comma-separated; * for every one")
	c.fs.Var(&perms, "permission", "a permission of the token, repeatable or comma-separated")
	quiet := c.fs.Bool("quiet", false, "print the secret alone, for a shell variable")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	req := &api.ACLTokenRequest{Namespaces: ns}
	for _, p := range perms {
		perm, err := csi.ParsePermission(p)
		if err != nil {
			return c.fail(err)
		}
		req.Permissions = append(req.Permissions, perm)
	}
	if err := validateIDs(idCheck{"token name", c.arg(0), func(s string) error { return csi.ValidateID("ACL token name", s) }}); err != nil {
		return c.fail(err)
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	tok, err := retry(ctx, c, func(ctx context.Context) (*api.ACLToken, error) { return cl.CreateACLToken(ctx, c.arg(0), req) })
	if err != nil {
		return c.fail(err)
	}
	return c.printToken(tok, *quiet)
}

func (e *env) aclList(ctx context.Context, args []string) int {
	c := e.newCommand("acl list", "", "Lists the ACL tokens' names and policies. Secrets are never shown: the server has none.", "refserver acl list")
	code := ExitOK
	if !c.parse(args, 0, 0, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	toks, err := cl.ACLTokens(ctx)
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(toks)
	}
	for _, t := range toks {
		fmt.Fprintf(e.stdout, "%s\tnamespaces %s\tpermissions %s\n", t.Name, orDash(strings.Join(t.Namespaces, ",")), orDash(joinPerms(t.Permissions)))
	}
	return ExitOK
}

func (e *env) aclDelete(ctx context.Context, args []string) int {
	c := e.newCommand("acl delete", "NAME", "Revokes the token NAME on every server. It needs a management (operator) token.", "refserver acl delete team-a")
	code := ExitOK
	if !c.parse(args, 1, 1, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	idx, err := retry(ctx, c, func(ctx context.Context) (uint64, error) { return cl.DeleteACLToken(ctx, c.arg(0)) })
	if err != nil {
		return c.fail(err)
	}
	if *c.json {
		return c.printJSON(api.WriteResponse{Index: idx})
	}
	fmt.Fprintf(e.stdout, "Token %s revoked\n", c.arg(0))
	return ExitOK
}

// printToken prints a token just made, with its secret.
func (c *command) printToken(tok *api.ACLToken, quiet bool) int {
	switch {
	case *c.json:
		return c.printJSON(tok)
	case quiet:
		fmt.Fprintln(c.e.stdout, tok.Token)
		return ExitOK
	}
	fmt.Fprintf(c.e.stdout, "Token %s (namespaces %s, permissions %s)\nSecret: %s\nIt is shown this once: the server keeps only its hash. Pass it with -token or $%s.\n",
		tok.Name, orDash(strings.Join(tok.Namespaces, ",")), orDash(joinPerms(tok.Permissions)), tok.Token, TokenEnv)
	return ExitOK
}

func joinPerms(ps []csi.Permission) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

func permissionNames() string { return joinPerms(csi.Permissions()) }
