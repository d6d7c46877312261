package molens

// Namespaces and API keys against MOLENS_KEYED_NODE_URL, a node whose bootstrap admin key is
// MOLENS_ADMIN_TOKEN (tests/integration/sdk_nodes.py).

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func keyedNode(t *testing.T) (string, string) {
	u, tok := os.Getenv("MOLENS_KEYED_NODE_URL"), os.Getenv("MOLENS_ADMIN_TOKEN")
	if u == "" || tok == "" {
		t.Skip("MOLENS_KEYED_NODE_URL not set (tests/integration/test_sdk_go.py starts a node and sets it)")
	}
	return u, tok
}

func uniqueNamespace(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

func TestAnAdminMakesANamespaceAndAWriterKeyThatCreatesAndListsInIt(t *testing.T) {
	base, admin := keyedNode(t)
	ctx := ctxT(t)
	a := newClient(t, []string{base}, WithToken(admin))
	ns := uniqueNamespace("go-pay")
	limit := int64(100)
	made, err := a.CreateNamespace(ctx, ns, Quotas{MaxPendingTasks: &limit})
	if err != nil || made.Name != ns || made.Quotas.MaxPendingTasks == nil || *made.Quotas.MaxPendingTasks != 100 {
		t.Fatalf("create namespace: %+v %v", made, err)
	}
	limit = 50
	if u, err := a.UpdateNamespace(ctx, ns, Quotas{MaxPendingTasks: &limit}); err != nil || *u.Quotas.MaxPendingTasks != 50 {
		t.Fatalf("update namespace: %+v %v", u, err)
	}
	all, err := a.ListNamespaces(ctx)
	if err != nil || len(all) < 2 || all[0].Name != "default" {
		t.Fatalf("list namespaces: %+v %v", all, err)
	}
	key, err := a.CreateAPIKey(ctx, APIKeyRequest{Name: "go-ci", Role: RoleWriter, Namespaces: []string{ns}})
	if err != nil || key.Secret == "" || key.Role != RoleWriter || len(key.Namespaces) != 1 || key.Namespaces[0] != ns {
		t.Fatalf("create key: %+v %v", key, err)
	}
	shown, err := a.GetAPIKey(ctx, key.ID)
	if err != nil || shown.Secret != "" || shown.Name != "go-ci" {
		t.Fatalf("a key is shown without its secret: %+v %v", shown, err)
	}
	keys, err := a.ListAPIKeys(ctx)
	found := false
	for _, k := range keys {
		found = found || k.ID == key.ID
		if k.Secret != "" {
			t.Fatalf("a listed key has its secret: %+v", k)
		}
	}
	if err != nil || !found {
		t.Fatalf("list keys: %+v %v", keys, err)
	}
	other, err := a.CreateTask(ctx, far(base, "go-default"))
	if err != nil || other.Namespace != "default" {
		t.Fatalf("admin create in default: %+v %v", other, err)
	}

	w := newClient(t, []string{base}, WithToken(key.Secret), WithNamespace(ns))
	one, err := w.CreateTask(ctx, far(base, "go-ns"))
	if err != nil || one.Namespace != ns {
		t.Fatalf("namespaced create: %+v %v", one, err)
	}
	batch, err := w.CreateTasks(ctx, []*TaskRequest{far(base, "go-ns"), far(base, "go-ns")})
	if err != nil || len(batch) != 2 || batch[0].Namespace != ns || batch[1].Namespace != ns {
		t.Fatalf("namespaced batch: %+v %v", batch, err)
	}
	page, err := w.ListTasks(ctx, ListOptions{})
	if err != nil || len(page.Items) != 3 {
		t.Fatalf("the writer lists its namespace's 3 tasks: %+v %v", page, err)
	}
	for _, task := range page.Items {
		if task.Namespace != ns {
			t.Fatalf("listed a task of %s", task.Namespace)
		}
	}
	_, err = w.CreateTask(ctx, far(base, "go-ns").SetNamespace("default"))
	if e := mustAPIError(t, err, 403, "forbidden", ""); !IsForbidden(e) {
		t.Fatal("IsForbidden")
	}
	if _, err := w.ListTasks(ctx, ListOptions{Namespace: "default"}); !IsForbidden(err) {
		t.Fatalf("a list of another namespace: %v", err)
	}
	if _, err := w.GetTask(ctx, other.ID); !IsNotFound(err) {
		t.Fatalf("another namespace's task is as good as missing: %v", err)
	}
	if _, err := w.ListAPIKeys(ctx); !IsForbidden(err) {
		t.Fatalf("a writer lists keys: %v", err)
	}

	mine, err := a.ListTasks(ctx, ListOptions{Namespace: ns})
	if err != nil || len(mine.Items) != 3 {
		t.Fatalf("the admin lists the namespace: %+v %v", mine, err)
	}
	if err := a.DeleteNamespace(ctx, ns); !IsConflict(err) {
		t.Fatalf("deleting a namespace that holds tasks: %v", err)
	}
	if err := a.DeleteAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.GetTask(ctx, one.ID); !IsUnauthorized(err) {
		t.Fatalf("a revoked key: %v", err)
	}
}

func TestAReadersWriteIsForbiddenAndAQuotaIsQuotaExceeded(t *testing.T) {
	base, admin := keyedNode(t)
	ctx := ctxT(t)
	a := newClient(t, []string{base}, WithToken(admin))
	ns := uniqueNamespace("go-tight")
	one := int64(1)
	if _, err := a.CreateNamespace(ctx, ns, Quotas{MaxPendingTasks: &one}); err != nil {
		t.Fatal(err)
	}
	key, err := a.CreateAPIKey(ctx, APIKeyRequest{Name: "go-dash", Role: RoleReader, Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	r := newClient(t, []string{base}, WithToken(key.Secret), WithNamespace(ns))
	_, err = r.CreateTask(ctx, far(base, "go-read"))
	mustAPIError(t, err, 403, "forbidden", "")
	if page, err := r.ListTasks(ctx, ListOptions{}); err != nil || len(page.Items) != 0 {
		t.Fatalf("a reader lists: %+v %v", page, err)
	}
	first, err := a.CreateTask(ctx, far(base, "go-quota").SetNamespace(ns))
	if err != nil || first.Namespace != ns {
		t.Fatalf("%+v %v", first, err)
	}
	_, err = a.CreateTasks(ctx, []*TaskRequest{far(base, "go-quota").SetNamespace(ns)})
	e := mustAPIError(t, err, 429, "quota_exceeded", "max_pending_tasks")
	if !IsQuotaExceeded(err) || e.Quota != "max_pending_tasks" || e.RetryAfter < time.Second {
		t.Fatalf("quota error: %+v", e)
	}
}

func TestABadNamespaceIsRefusedBeforeAnyRequest(t *testing.T) {
	if _, err := NewClient([]string{"http://127.0.0.1:9"}, WithNamespace("Not Valid")); err == nil {
		t.Fatal("a client of namespace \"Not Valid\"")
	}
	c := newClient(t, []string{"http://127.0.0.1:9"})
	if _, err := c.GetNamespace(ctxT(t), "../keys"); err == nil {
		t.Fatal("GetNamespace(\"../keys\")")
	}
}
