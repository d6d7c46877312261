package molens

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
)

// namespaceName is what a namespace may be called (docs/api.md#namespaces).
var namespaceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Role is what an API key may do (docs/api.md#keys-and-roles).
type Role string

const (
	RoleAdmin  Role = "admin"  // everything: tasks, flows, dead letters, namespaces, keys, membership
	RoleWriter Role = "writer" // create and change tasks, dead letters and its namespaces' own flows, and read them
	RoleReader Role = "reader" // read tasks, executions, dead letters and its namespaces' own flows
)

// Quotas bound a namespace; nil is unlimited.
type Quotas struct {
	MaxPendingTasks *int64   `json:"max_pending_tasks,omitempty"`
	CreatesPerS     *float64 `json:"creates_per_s,omitempty"`
	MaxPayloadBytes *int64   `json:"max_payload_bytes,omitempty"`
	FiresPerS       *float64 `json:"fires_per_s,omitempty"` // fires per second of all its tasks (due fires over it wait)
}

// Namespace groups tasks, their executions and dead letters.
type Namespace struct {
	Name      string `json:"name"`
	Quotas    Quotas `json:"quotas"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
}

// APIKey is a key as the API shows it. Secret is set only in CreateAPIKey's answer: the one time
// it is shown (give it to a client with WithToken).
type APIKey struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Role       Role     `json:"role"`
	Namespaces []string `json:"namespaces"` // or ["*"]: every namespace, present and future
	CreatedAt  int64    `json:"created_at"`
	LastUsedAt *int64   `json:"last_used_at"` // when the answering node last admitted it
	Secret     string   `json:"secret,omitempty"`
}

// APIKeyRequest is CreateAPIKey's body.
type APIKeyRequest struct {
	Name       string   `json:"name"`
	Role       Role     `json:"role"`
	Namespaces []string `json:"namespaces"`
}

func namespacePath(name string) (string, error) {
	if !namespaceName.MatchString(name) {
		return "", fmt.Errorf("molens: namespace must match %s, got %q", namespaceName, name)
	}
	return "/api/v1/namespaces/" + name, nil
}

func keyPath(id string) string { return "/api/v1/keys/" + url.PathEscape(id) }

// ListNamespaces returns the namespaces the key may read, "default" first.
func (c *Client) ListNamespaces(ctx context.Context) ([]Namespace, error) {
	return listItems[Namespace](ctx, c, "/api/v1/namespaces")
}

// GetNamespace returns one namespace (IsNotFound when it does not exist or lies outside the key's).
func (c *Client) GetNamespace(ctx context.Context, name string) (*Namespace, error) {
	return c.namespaceCall(ctx, "GET", name, nil)
}

// CreateNamespace makes a namespace (admin); IsConflict when it exists.
func (c *Client) CreateNamespace(ctx context.Context, name string, q Quotas) (*Namespace, error) {
	if _, err := namespacePath(name); err != nil {
		return nil, err
	}
	var ns Namespace
	body := map[string]interface{}{"name": name, "quotas": q}
	if err := c.do(ctx, "POST", "/api/v1/namespaces", nil, body, true, &ns); err != nil {
		return nil, err
	}
	return &ns, nil
}

// UpdateNamespace replaces the namespace's quotas whole (admin; IsConflict for "default").
func (c *Client) UpdateNamespace(ctx context.Context, name string, q Quotas) (*Namespace, error) {
	return c.namespaceCall(ctx, "PATCH", name, map[string]interface{}{"quotas": q})
}

// DeleteNamespace deletes an empty namespace (admin; IsConflict while it holds tasks, and for "default").
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	path, err := namespacePath(name)
	if err != nil {
		return err
	}
	return c.do(ctx, "DELETE", path, nil, nil, true, nil)
}

func (c *Client) namespaceCall(ctx context.Context, method, name string, body interface{}) (*Namespace, error) {
	path, err := namespacePath(name)
	if err != nil {
		return nil, err
	}
	var ns Namespace
	if err := c.do(ctx, method, path, nil, body, true, &ns); err != nil {
		return nil, err
	}
	return &ns, nil
}

// CreateAPIKey makes an API key (admin). The answer's Secret is shown this once. Not sent twice
// after a lost answer (that would make two keys): *OutcomeUnknownError instead.
func (c *Client) CreateAPIKey(ctx context.Context, r APIKeyRequest) (*APIKey, error) {
	var k APIKey
	if err := c.do(ctx, "POST", "/api/v1/keys", nil, r, false, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListAPIKeys returns every API key, oldest first, never a secret (admin).
func (c *Client) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	return listItems[APIKey](ctx, c, "/api/v1/keys")
}

// GetAPIKey returns one key without its secret (admin).
func (c *Client) GetAPIKey(ctx context.Context, id string) (*APIKey, error) {
	return getJSON[APIKey](ctx, c, keyPath(id), nil)
}

// DeleteAPIKey revokes a key on every node (admin; IsConflict for "bootstrap").
func (c *Client) DeleteAPIKey(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", keyPath(id), nil, nil, true, nil)
}
