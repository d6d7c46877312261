package molens

import (
	"context"
	"errors"
	"sync"
	"time"
)

// BatcherOptions configures NewBatcher. Zero values take the defaults.
type BatcherOptions struct {
	MaxBatch      int           // tasks per batch request, 1..1000 (default 500): a full batch is sent at once
	FlushInterval time.Duration // the oldest queued task waits at most this long (default 50 ms)
	MaxPending    int           // submitted but unanswered tasks; Submit blocks beyond it (default 100,000)
	Senders       int           // batch requests in flight at once (default 1)
	// IDsOnly: the batches ask for "Prefer: return=minimal" and each Pending resolves with a Task
	// holding only its ID, for loads that need no more of the created tasks.
	IDsOnly bool
}

// Pending is the future result of one submitted task.
type Pending struct {
	done chan struct{}
	task *Task
	err  error
}

// Done is closed once the task is created or has failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait returns the created task, or the task's own error (an invalid task fails only itself). An
// *OutcomeUnknownError carries the task's idempotency key in IdempotencyKeys. ctx bounds only this
// wait: a submitted task is sent whatever becomes of ctx (a Pending cannot be withdrawn), and
// Wait may be called again.
func (p *Pending) Wait(ctx context.Context) (*Task, error) {
	select {
	case <-p.done:
		return p.task, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type batchItem struct {
	req *TaskRequest
	p   *Pending
}

// Batcher collects Submit calls into batch creates, sent when MaxBatch tasks are queued, when the
// oldest has waited FlushInterval, on Flush and on Close. Every task gets an idempotency key when it
// is submitted, so a batch retried after a lost response (a leader killed mid-request) creates each
// task exactly once. Safe for concurrent use.
type Batcher struct {
	c       *Client
	opts    BatcherOptions
	in      chan batchItem
	flush   chan struct{}
	work    chan []batchItem
	slots   chan struct{}
	closing chan struct{} // closed when Close begins: a Submit waiting for room is refused
	wg      sync.WaitGroup

	mu     sync.RWMutex // closed, and Submit's send on in against Close's close(in)
	closed bool

	pendMu     sync.Mutex
	unanswered map[*Pending]struct{} // submitted and not yet answered: what a Flush waits for
}

// NewBatcher starts a batcher over c.
func (c *Client) NewBatcher(o BatcherOptions) *Batcher {
	if o.MaxBatch <= 0 || o.MaxBatch > 1000 {
		o.MaxBatch = 500
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 50 * time.Millisecond
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 100_000
	}
	if o.Senders <= 0 {
		o.Senders = 1
	}
	b := &Batcher{
		c: c, opts: o,
		in:         make(chan batchItem),
		flush:      make(chan struct{}),
		work:       make(chan []batchItem),
		slots:      make(chan struct{}, o.MaxPending),
		closing:    make(chan struct{}),
		unanswered: map[*Pending]struct{}{},
	}
	b.wg.Add(1 + o.Senders)
	go b.collect()
	for i := 0; i < o.Senders; i++ {
		go b.send()
	}
	return b
}

// Submit queues one task for creation (r is copied). It blocks while MaxPending tasks are
// unanswered, until ctx ends (ctx.Err()) or Close begins (ErrBatcherClosed); once it has returned a
// Pending, the task is sent whatever becomes of ctx.
func (b *Batcher) Submit(ctx context.Context, r *TaskRequest) (*Pending, error) {
	select {
	case b.slots <- struct{}{}:
	case <-b.closing:
		return nil, ErrBatcherClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p := &Pending{done: make(chan struct{})}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		<-b.slots
		return nil, ErrBatcherClosed
	}
	b.in <- batchItem{req: b.c.keyed(r), p: p} // the collector always receives at once: it never waits on a sender
	b.pendMu.Lock()
	select {
	case <-p.done: // answered already
	default:
		b.unanswered[p] = struct{}{}
	}
	b.pendMu.Unlock()
	return p, nil
}

// Flush sends everything queued now and waits until every task submitted before it has been
// answered (tasks other goroutines submit meanwhile are not waited for: they go as usual).
func (b *Batcher) Flush(ctx context.Context) error {
	b.pendMu.Lock()
	waiting := make([]*Pending, 0, len(b.unanswered))
	for p := range b.unanswered {
		waiting = append(waiting, p)
	}
	b.pendMu.Unlock()
	b.mu.RLock()
	if !b.closed {
		b.flush <- struct{}{}
	}
	b.mu.RUnlock()
	for _, p := range waiting {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close sends everything queued, waits for the answers and stops the batcher. A Submit from then
// on, also one waiting for room when Close begins, returns ErrBatcherClosed.
func (b *Batcher) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.closing)
		close(b.in)
	}
	b.mu.Unlock()
	b.wg.Wait()
	return nil
}

func (b *Batcher) collect() {
	defer b.wg.Done()
	defer close(b.work)
	var batch []batchItem
	var ready [][]batchItem // batches waiting for a sender: queued here so that Submit never waits on one
	var timer *time.Timer
	var timeout <-chan time.Time
	emit := func() {
		if timer != nil {
			timer.Stop()
			timer, timeout = nil, nil
		}
		if len(batch) > 0 {
			ready = append(ready, batch)
			batch = nil
		}
	}
	in := b.in
	for in != nil || len(ready) > 0 {
		var work chan<- []batchItem // nil (never chosen) while no batch is ready
		var next []batchItem
		if len(ready) > 0 {
			work, next = b.work, ready[0]
		}
		select {
		case it, ok := <-in:
			if !ok { // Close: what is queued goes, then the senders stop
				emit()
				in = nil
				continue
			}
			batch = append(batch, it)
			if len(batch) == 1 {
				timer = time.NewTimer(b.opts.FlushInterval)
				timeout = timer.C
			}
			if len(batch) >= b.opts.MaxBatch {
				emit()
			}
		case work <- next:
			ready[0] = nil
			ready = ready[1:]
		case <-timeout:
			timer, timeout = nil, nil
			emit()
		case <-b.flush:
			emit()
		}
	}
}

func (b *Batcher) send() {
	defer b.wg.Done()
	for batch := range b.work {
		b.sendBatch(batch)
	}
}

func (b *Batcher) sendBatch(batch []batchItem) {
	ctx := context.Background() // the client's retry budget bounds it
	for len(batch) > 0 {
		reqs := make([]*TaskRequest, len(batch))
		for i, it := range batch {
			reqs[i] = it.req
		}
		tasks, errs, err := b.c.createBatchAs(ctx, reqs, b.opts.IDsOnly)
		if err != nil {
			var ae *APIError
			if errors.As(err, &ae) && len(ae.ItemErrors) > 0 {
				keep := batch[:0:0]
				for i, it := range batch {
					if e := ae.ItemErrors[i]; e != nil {
						b.resolve(it.p, nil, e)
					} else {
						keep = append(keep, it)
					}
				}
				if len(keep) < len(batch) { // the valid rest is re-sent at once
					batch = keep
					continue
				}
			}
			var ou *OutcomeUnknownError
			unknown := errors.As(err, &ou)
			for _, it := range batch {
				if unknown { // each Pending gets its own task's key
					b.resolve(it.p, nil, &OutcomeUnknownError{Op: ou.Op, Err: ou.Err, IdempotencyKeys: []string{*it.req.IdempotencyKey}})
				} else {
					b.resolve(it.p, nil, err)
				}
			}
			return
		}
		for i, it := range batch {
			if errs[i] != nil {
				b.resolve(it.p, nil, errs[i])
			} else {
				b.resolve(it.p, tasks[i], nil)
			}
		}
		return
	}
}

func (b *Batcher) resolve(p *Pending, t *Task, err error) {
	p.task, p.err = t, err
	b.pendMu.Lock()
	delete(b.unanswered, p)
	close(p.done)
	b.pendMu.Unlock()
	<-b.slots
}
