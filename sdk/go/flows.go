package molens

import (
	"context"
	"net/url"
)

// FlowLimits is the body of SetFlow: a flow's limits, replaced whole (a nil limit is unlimited).
// Burst and Adaptive need RatePerS (docs/api.md#flows).
type FlowLimits struct {
	RatePerS    *float64 `json:"rate_per_s"`  // fires per second (token bucket), > 0 and <= 1,000,000
	Burst       *int64   `json:"burst"`       // fires at once after an idle spell (server default 1: evenly spaced)
	Concurrency *int64   `json:"concurrency"` // fires in flight at once, across all workers
	Paused      bool     `json:"paused"`      // hold every fire of the flow until resumed
	Adaptive    bool     `json:"adaptive"`    // back the rate off on 429/503/timeouts and ramp it back (AIMD)
}

func (l *FlowLimits) SetRatePerS(v float64) *FlowLimits  { l.RatePerS = &v; return l }
func (l *FlowLimits) SetBurst(v int64) *FlowLimits       { l.Burst = &v; return l }
func (l *FlowLimits) SetConcurrency(v int64) *FlowLimits { l.Concurrency = &v; return l }

// Flow is one flow as the API shows it: its settings and, when Live, the leader's figures (nil
// otherwise: no leader answered).
type Flow struct {
	Key               string   `json:"key"`
	Configured        bool     `json:"configured"` // the flow has settings; else it is unlimited
	RatePerS          *float64 `json:"rate_per_s"`
	Burst             *int64   `json:"burst"`
	Concurrency       *int64   `json:"concurrency"`
	Paused            bool     `json:"paused"`
	Adaptive          bool     `json:"adaptive"`
	UpdatedAt         *int64   `json:"updated_at"`
	Live              bool     `json:"live"`
	Rate              *int64   `json:"rate"`            // fires let go in the last second
	InFlight          *int64   `json:"in_flight"`       // sent and not yet answered
	Queued            *int64   `json:"queued"`          // due fires held back
	ThrottledUntil    *int64   `json:"throttled_until"` // epoch ms a receiver's Retry-After holds the flow until; 0: not held
	EffectiveRatePerS *float64 `json:"effective_rate_per_s"`
}

func flowPath(key string) string { return "/api/v1/flows/" + url.PathEscape(key) }

// ListFlows is every flow with settings and every flow the leader let a fire go for in the last
// minute (or holds fires of), by key.
func (c *Client) ListFlows(ctx context.Context) ([]Flow, error) {
	return listItems[Flow](ctx, c, "/api/v1/flows")
}

// GetFlow is one flow (IsNotFound when it has no settings and nothing in flight, held or throttled).
func (c *Client) GetFlow(ctx context.Context, key string) (*Flow, error) {
	return getJSON[Flow](ctx, c, flowPath(key), nil)
}

// SetFlow replaces the flow's limits whole (replicated through Raft) and returns the flow.
func (c *Client) SetFlow(ctx context.Context, key string, l FlowLimits) (*Flow, error) {
	return c.flowCall(ctx, "PUT", flowPath(key), l, true)
}

// DeleteFlow forgets the flow's settings: its fires go unlimited (IsNotFound when it has none).
// Not retried after an unknown outcome: the retry would answer 404.
func (c *Client) DeleteFlow(ctx context.Context, key string) (*Flow, error) {
	return c.flowCall(ctx, "DELETE", flowPath(key), nil, false)
}

// PauseFlow holds every fire of the flow until ResumeFlow; only the paused flag changes (a flow
// without settings gets some).
func (c *Client) PauseFlow(ctx context.Context, key string) (*Flow, error) {
	return c.flowCall(ctx, "POST", flowPath(key)+"/pause", nil, true)
}

// ResumeFlow lets the flow's held fires go, in order, within its limits.
func (c *Client) ResumeFlow(ctx context.Context, key string) (*Flow, error) {
	return c.flowCall(ctx, "POST", flowPath(key)+"/resume", nil, true)
}

func (c *Client) flowCall(ctx context.Context, method, path string, body interface{}, safe bool) (*Flow, error) {
	var f Flow
	if err := c.do(ctx, method, path, nil, body, safe, &f); err != nil {
		return nil, err
	}
	return &f, nil
}
