// Command sdkgo drives the Go SDK's Batcher against a running cluster for a fixed time and prints
// one JSON line of figures; scripts/bench/sdk_go.py builds it, runs it and prints the summary line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	molens "molens.dev/sdk/go"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func main() {
	urls := flag.String("urls", "", "comma-separated node URLs")
	token := flag.String("token", "", "bearer token")
	seconds := flag.Float64("seconds", 10, "how long to submit")
	batch := flag.Int("batch", 500, "Batcher MaxBatch")
	senders := flag.Int("senders", 4, "Batcher Senders")
	interval := flag.Duration("interval", 50*time.Millisecond, "Batcher FlushInterval")
	submitters := flag.Int("submitters", 4, "goroutines calling Submit")
	callback := flag.String("callback", "http://127.0.0.1:9/bench", "callback_url of the tasks (they fire in an hour)")
	flag.Parse()
	c, err := molens.NewClient(strings.Split(*urls, ","), molens.WithToken(*token))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	req := func(i int64) *molens.TaskRequest {
		return molens.NewTaskRequest("delayed", *callback).SetIntervalMs(3_600_000).SetPayload(map[string]int64{"i": i})
	}
	if _, err := c.CreateTask(ctx, req(-1)); err != nil { // warm up + leader discovery
		fmt.Fprintln(os.Stderr, "warm-up create:", err)
		os.Exit(1)
	}
	b := c.NewBatcher(molens.BatcherOptions{MaxBatch: *batch, Senders: *senders, FlushInterval: *interval, MaxPending: 20 * *batch * *senders})
	var created, failed, next int64
	var firstErr atomic.Value
	pending := make(chan *molens.Pending, 100_000)
	var waiters sync.WaitGroup
	waiters.Add(1)
	go func() {
		defer waiters.Done()
		for p := range pending {
			if _, err := p.Wait(ctx); err != nil {
				atomic.AddInt64(&failed, 1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				atomic.AddInt64(&created, 1)
			}
		}
	}()
	cpu0, t0 := cpuSeconds(), time.Now()
	stop := t0.Add(time.Duration(*seconds * float64(time.Second)))
	var subs sync.WaitGroup
	for k := 0; k < *submitters; k++ {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for time.Now().Before(stop) {
				p, err := b.Submit(ctx, req(atomic.AddInt64(&next, 1)))
				if err != nil {
					atomic.AddInt64(&failed, 1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				pending <- p
			}
		}()
	}
	subs.Wait()
	b.Close()
	close(pending)
	waiters.Wait()
	elapsed := time.Since(t0).Seconds()
	cpu := cpuSeconds() - cpu0
	out := map[string]interface{}{
		"created": created, "failed": failed, "elapsed_s": elapsed,
		"creates_per_s":         float64(created) / elapsed,
		"sdk_cpu_us_per_create": cpu / float64(max64(created, 1)) * 1e6,
		"first_error":           firstErr.Load(),
	}
	json.NewEncoder(os.Stdout).Encode(out)
	if failed > 0 {
		os.Exit(1)
	}
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
