package retry

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestNextDoublesUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		name         string
		initial, max time.Duration
		want         []time.Duration
	}{
		{"doubling to a cap", 10 * ms, 200 * ms, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms}},
		{"a cap that is not a doubling", ms, 20 * ms, []time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 16 * ms, 20 * ms}},
		{"constant when Initial == Max", 5 * ms, 5 * ms, []time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"a Max below Initial caps at Initial", 50 * ms, 10 * ms, []time.Duration{50 * ms, 50 * ms}},
		{"the zero value waits nothing", 0, 0, []time.Duration{0, 0, 0}},
		{"a zero Initial stays zero", 0, time.Second, []time.Duration{0, 0}},
		{"negative durations count as zero", -ms, -ms, []time.Duration{0, 0}},
		{"a huge cap does not overflow", time.Duration(math.MaxInt64/2 + 1), time.Duration(math.MaxInt64),
			[]time.Duration{math.MaxInt64/2 + 1, math.MaxInt64, math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Backoff{Initial: tc.initial, Max: tc.max}
			var got []time.Duration
			for range tc.want {
				got = append(got, b.Next())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("delays %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResetStartsAgainFromInitial(t *testing.T) {
	b := Backoff{Initial: 5 * ms, Max: time.Second}
	for range 4 {
		b.Next()
	}
	b.Reset()
	if d := b.Next(); d != 5*ms {
		t.Fatalf("after Reset: %v, want 5ms", d)
	}
	if d := b.Next(); d != 10*ms {
		t.Fatalf("second after Reset: %v, want 10ms", d)
	}
}

// fakeClock records each wait and answers it at once.
type fakeClock struct{ waits []time.Duration }

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func TestWaitSleepsEachDelayOnTheClock(t *testing.T) {
	var c fakeClock
	b := Backoff{Initial: 20 * ms, Max: 500 * ms, After: c.after}
	for range 6 {
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 500 * ms}
	if !slices.Equal(c.waits, want) {
		t.Fatalf("waits %v, want %v", c.waits, want)
	}
}

func TestSleepOfNothingDoesNotTouchTheClock(t *testing.T) {
	var c fakeClock
	b := Backoff{After: c.after}
	if err := b.Wait(context.Background()); err != nil || len(c.waits) != 0 {
		t.Fatalf("zero delay: err %v, waits %v; want nil and none", err, c.waits)
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	t.Run("already done: at once, no wait", func(t *testing.T) {
		var c fakeClock
		b := Backoff{Initial: time.Hour, Max: time.Hour, After: c.after}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := b.Wait(ctx); !errors.Is(err, context.Canceled) || len(c.waits) != 0 {
			t.Fatalf("err %v, waits %v; want context.Canceled and none", err, c.waits)
		}
	})
	t.Run("done while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		b := Backoff{Initial: time.Hour, Max: time.Hour, After: func(time.Duration) <-chan time.Time {
			cancel()   // the context ends during the wait
			return nil // and the clock never fires
		}}
		if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
}
