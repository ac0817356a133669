package api

import (
	"context"
	"net/http"

	"github.com/csikit/csikit/csi"
)

// ACLTokenRequest is the policy of a token to make (PUT
// /v1/acl/tokens/{name}): its permissions in its namespaces ("*" for
// every namespace).
type ACLTokenRequest struct {
	Namespaces  []string
	Permissions []csi.Permission
}

// ACLToken is a token as the server shows it: its name and policy,
// and, only in the answer that made it, its secret (Token), which the
// server keeps nowhere.
type ACLToken struct {
	Name        string
	Token       string `json:",omitempty"`
	Namespaces  []string
	Permissions []csi.Permission
	Index       uint64 `json:",omitempty"`
}

// BootstrapACL makes the first management token (csi.PermOperator) of
// a server whose ACL tokens live in the replicated state, and returns
// it with its secret, shown once. Once any token exists it is refused
// (csi.ErrPermissionDenied) on every server of the cluster.
func (c *Client) BootstrapACL(ctx context.Context) (*ACLToken, error) {
	var out ACLToken
	if _, err := c.do(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateACLToken makes (or replaces, with a new secret) the token name
// with the policy of req; it needs an operator token.
func (c *Client) CreateACLToken(ctx context.Context, name string, req *ACLTokenRequest) (*ACLToken, error) {
	var out ACLToken
	if _, err := c.do(ctx, http.MethodPut, "/v1/acl/tokens/"+esc(name), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ACLTokens lists the tokens' names and policies, never a secret; it
// needs an operator token.
func (c *Client) ACLTokens(ctx context.Context) ([]ACLToken, error) {
	var out []ACLToken
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/tokens", nil, nil, &out)
	return out, err
}

// DeleteACLToken revokes the token name and returns the index of the
// write; it needs an operator token.
func (c *Client) DeleteACLToken(ctx context.Context, name string) (uint64, error) {
	var out WriteResponse
	if _, err := c.do(ctx, http.MethodDelete, "/v1/acl/tokens/"+esc(name), nil, nil, &out); err != nil {
		return 0, err
	}
	return out.Index, nil
}
