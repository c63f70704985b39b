package healrun

import (
	"context"
	"sync"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// RampShare is the share of a heal's mean rate that a heal has reached
// its steady rate at: Ramp is the first time the rate over the last
// RampSpan reached RampShare times the mean.
const (
	RampShare = 0.8
	RampSpan  = 2 * time.Second
)

// ArrivedSample is the backfill bytes arrived on the running brokers,
// summed, at a moment.
type ArrivedSample struct {
	At    time.Time
	Bytes int64
}

// Ramp is how long after from the heal's rate, over the last RampSpan of
// samples (oldest first), first reached RampShare times mean (bytes per
// second); false when it never did.
func Ramp(samples []ArrivedSample, from time.Time, mean float64) (time.Duration, bool) {
	j := 0
	for i, s := range samples {
		for j < i && s.At.Sub(samples[j+1].At) >= RampSpan {
			j++
		}
		span := s.At.Sub(samples[j].At)
		if j == i || span < RampSpan || s.At.Before(from) {
			continue
		}
		if float64(s.Bytes-samples[j].Bytes)/span.Seconds() >= RampShare*mean {
			return s.At.Sub(from), true
		}
	}
	return 0, false
}

// arrivals samples the arrived bytes of the running brokers but skip
// every interval until stop. With a window above 0 it closes ended once
// the samples span window from the heal's start: the last sample before
// bytes began to arrive (above base).
type arrivals struct {
	ended chan struct{}
	done  chan struct{}
	stopc context.CancelFunc

	mu      sync.Mutex
	samples []ArrivedSample
	start   time.Time // the heal's start, once bytes arrived
	over    bool      // ended was closed
}

func (hc *Cluster) sampleArrivals(ctx context.Context, skip meta.BrokerID, interval, window time.Duration, base int64) *arrivals {
	ctx, cancel := context.WithCancel(ctx)
	a := &arrivals{ended: make(chan struct{}), done: make(chan struct{}), stopc: cancel}
	go func() {
		defer close(a.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if s, err := hc.stageSums(ctx, skip); err == nil && a.add(ArrivedSample{At: s.at, Bytes: s.arrived}, window, base) {
				close(a.ended)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return a
}

// add records s and reports whether the window is over.
func (a *arrivals) add(s ArrivedSample, window time.Duration, base int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.start.IsZero() && s.Bytes > base {
		a.start = s.At
		if n := len(a.samples); n > 0 {
			a.start = a.samples[n-1].At
		}
	}
	a.samples = append(a.samples, s)
	a.over = window > 0 && !a.start.IsZero() && s.At.Sub(a.start) >= window
	return a.over
}

// stop ends the sampling and returns the samples, the heal's start (zero:
// no byte arrived) and whether the window was over.
func (a *arrivals) stop() ([]ArrivedSample, time.Time, bool) {
	a.stopc()
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.samples, a.start, a.over
}
