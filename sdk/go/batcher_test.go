package molens

// The Batcher against a stand-in node (no real node needed): a busy sender, Close and Flush racing
// Submit, and answers that do not fit the batch.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// batchNode answers every batch create with one {"id"} item per task, each after hold(scenes of
// the batch's tasks) returns; got receives the scenes of each batch as it arrives.
func batchNode(t *testing.T, hold func([]string)) (*httptest.Server, chan []string) {
	got := make(chan []string, 100)
	var n int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tasks []struct {
				Scene string `json:"scene"`
			} `json:"tasks"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		scenes := make([]string, len(req.Tasks))
		for i, tk := range req.Tasks {
			scenes[i] = tk.Scene
		}
		got <- scenes
		if hold != nil {
			hold(scenes)
		}
		items := make([]map[string]string, len(scenes))
		for i := range items {
			items[i] = map[string]string{"id": fmt.Sprintf("01ARZ3NDEKTSV4RRFFQ%07d", atomic.AddInt64(&n, 1))}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]interface{}{"items": items, "errors": []interface{}{}})
	}))
	t.Cleanup(s.Close)
	return s, got
}

// arrived waits for the next batch the node got.
func arrived(t *testing.T, got chan []string) []string {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no batch arrived")
		return nil
	}
}

// returnsWithin runs fn and reports whether it returned within d (it is left running otherwise).
func returnsWithin(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestASubmitIsNotHeldUpByABusySenderAndHonoursItsContext(t *testing.T) {
	// one sender busy with a batch and the next batch ready: a Submit far below MaxPending must not
	// wait for the sender (nor ignore its context while it does)
	release := make(chan struct{})
	node, got := batchNode(t, func([]string) { <-release })
	c := newClient(t, []string{node.URL})
	b := c.NewBatcher(BatcherOptions{MaxBatch: 1, FlushInterval: time.Hour, Senders: 1})
	defer b.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	ctx := context.Background()
	p1, err := b.Submit(ctx, far(node.URL, "1"))
	if err != nil {
		t.Fatal(err)
	}
	arrived(t, got) // the sender is busy with it
	p2, err := b.Submit(ctx, far(node.URL, "2"))
	if err != nil {
		t.Fatal(err)
	}
	var p3 *Pending
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if !returnsWithin(3*time.Second, func() { p3, err = b.Submit(short, far(node.URL, "3")) }) {
		t.Fatal("Submit waited for a busy sender, its context ended 300 ms in")
	}
	if err != nil {
		t.Fatalf("Submit with room left: %v", err)
	}
	close(release)
	released = true
	for i, p := range []*Pending{p1, p2, p3} {
		if task, err := p.Wait(ctxT(t)); err != nil || task.ID == "" {
			t.Fatalf("pending %d: %+v %v", i+1, task, err)
		}
	}
}

func TestASubmitWaitingForRoomWhenCloseBeginsIsRefused(t *testing.T) {
	release := make(chan struct{})
	node, got := batchNode(t, func([]string) { <-release })
	c := newClient(t, []string{node.URL})
	b := c.NewBatcher(BatcherOptions{MaxBatch: 1, FlushInterval: time.Hour, MaxPending: 1})
	p1, err := b.Submit(context.Background(), far(node.URL, "1"))
	if err != nil {
		t.Fatal(err)
	}
	arrived(t, got)
	var p2 *Pending
	var err2 error
	submitted := make(chan struct{})
	go func() { defer close(submitted); p2, err2 = b.Submit(context.Background(), far(node.URL, "2")) }()
	time.Sleep(50 * time.Millisecond) // waiting for room
	closed := make(chan struct{})
	go func() { defer close(closed); b.Close() }()
	pollUntil(t, "Close to begin", 5*time.Second, func() (bool, error) {
		b.mu.RLock()
		defer b.mu.RUnlock()
		return b.closed, nil
	})
	select {
	case <-submitted:
	case <-time.After(3 * time.Second):
		t.Error("a Submit waiting for room still waits after Close began")
	}
	close(release)
	<-closed
	<-submitted
	if p2 != nil || !errors.Is(err2, ErrBatcherClosed) {
		t.Fatalf("the Submit waiting when Close began: %v %v", p2, err2)
	}
	if _, err := p1.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Submit(context.Background(), far(node.URL, "3")); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}

func TestFlushWaitsForWhatWasSubmittedBeforeItNotForWhatComesAfter(t *testing.T) {
	// a steady producer always has something unanswered: Flush must not wait for that
	release := make(chan struct{})
	node, got := batchNode(t, func(scenes []string) {
		if scenes[0] == "before" {
			<-release
		}
	})
	c := newClient(t, []string{node.URL})
	b := c.NewBatcher(BatcherOptions{MaxBatch: 1000, FlushInterval: time.Hour})
	defer b.Close()
	ctx := context.Background()
	before, err := b.Submit(ctx, far(node.URL, "before"))
	if err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	go func() { flushed <- b.Flush(fctx) }()
	if s := arrived(t, got); len(s) != 1 || s[0] != "before" {
		t.Fatalf("Flush sent %q", s)
	}
	after, err := b.Submit(ctx, far(node.URL, "after")) // queued: its interval is an hour away
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatalf("Flush waited for a task submitted after it: %v", err)
	}
	select {
	case <-before.Done():
	default:
		t.Fatal("Flush returned before the task submitted before it was answered")
	}
	select {
	case <-after.Done():
		t.Fatal("the task submitted after Flush went without its batch being due")
	default:
	}
	// a second Flush takes it along
	if err := b.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if task, err := after.Wait(ctxT(t)); err != nil || task.ID == "" {
		t.Fatalf("%+v %v", task, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctxT(t)); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
}

func TestEveryPendingResolvesWhenTheAnswerDoesNotFitTheBatch(t *testing.T) {
	for _, body := range []string{
		`{"items": [{"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}], "errors": []}`,       // one item for two tasks
		`{"items": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "errors": []}`,      // three
		`{"items": null, "errors": []}`,                                         // none
		`{"items": [null, {"id": "b"}], "errors": [{"index": 7, "error": {}}]}`, // a hole, an error out of range
	} {
		for _, idsOnly := range []bool{false, true} {
			node := standIn(t, false, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) })
			c := newClient(t, []string{node.URL})
			b := c.NewBatcher(BatcherOptions{MaxBatch: 2, FlushInterval: time.Hour, IDsOnly: idsOnly})
			var ps []*Pending
			for _, scene := range []string{"a", "b"} {
				p, err := b.Submit(context.Background(), far(node.URL, scene))
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			if !returnsWithin(5*time.Second, func() { b.Close() }) {
				t.Fatalf("%s: Close hangs", body)
			}
			failed := 0
			for i, p := range ps {
				select {
				case <-p.Done():
				default:
					t.Fatalf("%s, IDsOnly %v: pending %d never resolved", body, idsOnly, i)
				}
				task, err := p.Wait(context.Background())
				if err != nil {
					failed++
				} else if task == nil || task.ID == "" {
					t.Fatalf("%s: pending %d resolved with %+v and no error", body, i, task)
				}
			}
			if failed == 0 {
				t.Fatalf("%s, IDsOnly %v: every pending succeeded", body, idsOnly)
			}
		}
	}
}
