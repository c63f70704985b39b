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

// sampleArrived reads the arrived bytes of the running brokers but skip
// every interval until the returned stop, which returns the samples.
func (hc *Cluster) sampleArrived(ctx context.Context, skip meta.BrokerID, interval time.Duration) (stop func() []ArrivedSample) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var out []ArrivedSample
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if s, err := hc.stageSums(ctx, skip); err == nil {
				mu.Lock()
				out = append(out, ArrivedSample{At: s.at, Bytes: s.arrived})
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []ArrivedSample {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}
