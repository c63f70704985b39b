package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// BackfillMetric counts the bytes a broker's committed backfills received
// (plugin/metrics.go).
const BackfillMetric = "malachi_heal_backfill_bytes_total"

// ScrapeCounter reads one unlabelled sample from the Prometheus text
// exposition a plugin serves at GET /metrics on its rpc_listen, p (HTTPS
// with the client's certificate, or plaintext in insecure mode).
func ScrapeCounter(ctx context.Context, p *admin.Client, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, err := p.GetRaw(ctx, "/metrics")
	if err != nil {
		return 0, fmt.Errorf("plugin: %w", err)
	}
	v, err := parseSample(bufio.NewScanner(bytes.NewReader(body)), name)
	if err != nil {
		return 0, fmt.Errorf("plugin %s: GET /metrics: %w", p.Addr(), err)
	}
	return v, nil
}

// parseSample finds "name value" (or "name{} value") in exposition lines.
func parseSample(sc *bufio.Scanner, name string) (float64, error) {
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 || end > 1 {
				continue // labelled sample: not the one asked for
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		return strconv.ParseFloat(f[0], 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not exposed", name)
}

// counterReading is a broker's counter with the process it was read from,
// so that a restart (counter back at zero) is told apart from a decrease.
type counterReading struct {
	pid   int
	value float64
}

// BackfillMark is every running broker's backfill byte counter at a
// moment (Cluster.MarkBackfill).
type BackfillMark map[meta.BrokerID]counterReading

// MarkBackfill reads every running broker's backfill byte counter.
func (c *Cluster) MarkBackfill(ctx context.Context) BackfillMark {
	out := BackfillMark{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range c.Running() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := ScrapeCounter(ctx, b.Plugin, BackfillMetric)
			if err != nil {
				return
			}
			mu.Lock()
			out[b.ID] = counterReading{pid: b.Pid(), value: v}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// Since is the bytes c's backfills received since the mark (a broker
// restarted since counts from zero).
func (m BackfillMark) Since(ctx context.Context, c *Cluster) int64 {
	var total float64
	for id, now := range c.MarkBackfill(ctx) {
		was, ok := m[id]
		if ok && was.pid == now.pid && now.value >= was.value {
			total += now.value - was.value
		} else {
			total += now.value
		}
	}
	return int64(total)
}
