package molens

// Against a stand-in node: a batch applied without some of its items (their namespace deleted
// while it was in flight) and a batch rejected for a namespace that does not exist.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
)

func TestABatchAppliedWithoutSomeItemsReportsEveryTaskItCreatedAndTheErrorsByIndex(t *testing.T) {
	// 2,003 tasks: the first batch is created whole, the second is applied without its item 1
	// (listed: not_found) and its item 5 (null, listed nowhere); the third is never sent
	for _, minimal := range []bool{false, true} {
		var mu sync.Mutex
		var sent [][]string
		node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
			keys := requestKeys(r)
			mu.Lock()
			batch := len(sent)
			sent = append(sent, keys)
			mu.Unlock()
			items := make([]interface{}, len(keys))
			for i := range items {
				items[i] = map[string]string{"id": fmt.Sprintf("b%d-%d", batch, i), "status": "pending"}
			}
			errs := []interface{}{}
			if batch == 1 {
				items[1], items[5] = nil, nil
				errs = append(errs, map[string]interface{}{"index": 1, "error": map[string]string{
					"code": "not_found", "message": "namespace gone not found", "field": "namespace"}})
			}
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(map[string]interface{}{"items": items, "errors": errs})
		})
		c := newClient(t, []string{node.URL})
		rs := make([]*TaskRequest, 2003)
		for i := range rs {
			rs[i] = far(node.URL, "a")
		}
		var got []string
		var err error
		if minimal {
			got, err = c.CreateTaskIDs(context.Background(), rs)
		} else {
			var made []*Task
			made, err = c.CreateTasks(context.Background(), rs)
			for _, tk := range made {
				got = append(got, tk.ID)
			}
		}
		var bp *BatchPartlyCreatedError
		if !errors.As(err, &bp) {
			t.Fatalf("minimal %v: got %T %v", minimal, err, err)
		}
		if len(got) != 1000 || got[999] != "b0-999" {
			t.Fatalf("minimal %v: returned %d tasks (the earlier batches' alone)", minimal, len(got))
		}
		if len(bp.Tasks) != len(rs) {
			t.Fatalf("minimal %v: Tasks has %d, not one per task given", minimal, len(bp.Tasks))
		}
		for i, tk := range bp.Tasks {
			var want string
			switch {
			case i < 1000:
				want = fmt.Sprintf("b0-%d", i)
			case i < 2000 && i != 1001 && i != 1005:
				want = fmt.Sprintf("b1-%d", i-1000)
			}
			if (tk == nil) != (want == "") || (tk != nil && tk.ID != want) {
				t.Fatalf("minimal %v: Tasks[%d] = %+v, want %q", minimal, i, tk, want)
			}
		}
		if len(bp.ItemErrors) != 2 || bp.ItemErrors[1001] == nil || bp.ItemErrors[1005] == nil {
			t.Fatalf("minimal %v: item errors %+v", minimal, bp.ItemErrors)
		}
		gone := bp.ItemErrors[1001]
		if !IsNotFound(gone) || gone.Code != "not_found" || gone.Field != "namespace" {
			t.Fatalf("minimal %v: a namespace gone is %+v, not a 404 not_found", minimal, gone)
		}
		if e := bp.ItemErrors[1005]; e.Status != 500 || e.Code != "internal" {
			t.Fatalf("minimal %v: an item answered with nothing is %+v", minimal, e)
		}
		mu.Lock()
		if len(sent) != 2 || len(bp.IdempotencyKeys) != len(rs) ||
			!reflect.DeepEqual(bp.IdempotencyKeys[:1000], sent[0]) || !reflect.DeepEqual(bp.IdempotencyKeys[1000:2000], sent[1]) {
			t.Fatalf("minimal %v: sent %d batches; keys %d", minimal, len(sent), len(bp.IdempotencyKeys))
		}
		mu.Unlock()
		if want := "molens: 1998 of 2003 tasks created; task 1001 was not: 404 not_found: namespace gone not found (field namespace)"; bp.Error() != want {
			t.Fatalf("message %q", bp.Error())
		}
	}
}

func TestABatchRejectedForANamespaceThatDoesNotExistListsItsItemsAsNotFound(t *testing.T) {
	node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error": {"code": "invalid_argument", "field": "tasks[1].namespace",
			"message": "2 of 2 tasks are invalid (first: tasks[0]: ...); nothing was created"},
			"items": [null, null],
			"errors": [{"index": 0, "error": {"code": "invalid_argument", "field": "interval_ms", "message": "bad"}},
			           {"index": 1, "error": {"code": "not_found", "field": "namespace", "message": "namespace x not found"}}]}`)
	})
	c := newClient(t, []string{node.URL})
	made, err := c.CreateTasks(context.Background(), []*TaskRequest{far(node.URL, "a"), far(node.URL, "b")})
	e := mustAPIError(t, err, 400, "invalid_argument", "tasks[1].namespace")
	if len(made) != 0 || len(e.ItemErrors) != 2 || !IsBadRequest(e.ItemErrors[0]) || !IsNotFound(e.ItemErrors[1]) {
		t.Fatalf("made %v, item errors %+v", made, e.ItemErrors)
	}
}
