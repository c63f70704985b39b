package retry

import (
	"context"
	"math"
	"time"
)

// Backoff is the delay between the tries of one retry loop.
type Backoff struct {
	// Initial is the first delay, and the first again after Reset.
	Initial time.Duration
	// Max caps every delay; a Max below Initial caps at Initial.
	Max time.Duration
	// After waits d on the clock; nil is time.After.
	After func(d time.Duration) <-chan time.Time

	next time.Duration // the coming delay; 0: Initial
}

// Next returns the delay before the coming try and doubles the one after
// it, up to the cap.
func (b *Backoff) Next() time.Duration {
	limit := max(b.Max, b.Initial, 0)
	d := b.next
	if d <= 0 {
		d = max(b.Initial, 0)
	}
	d = min(d, limit)
	if d > math.MaxInt64/2 {
		b.next = limit
	} else {
		b.next = min(2*d, limit)
	}
	return d
}

// Reset makes the coming delay Initial again.
func (b *Backoff) Reset() { b.next = 0 }

// Wait sleeps Next(), bounded by ctx: it returns ctx.Err() when ctx is
// done first.
func (b *Backoff) Wait(ctx context.Context) error {
	return b.Sleep(ctx, b.Next())
}

// Sleep waits d on the Backoff's clock, bounded by ctx: it returns
// ctx.Err() when ctx is done first, or already is.
func (b *Backoff) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	after := b.After
	if after == nil {
		after = time.After
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-after(d):
		return nil
	}
}
