// Package retry is the wait between the tries of a retry loop: Backoff
// doubles a delay from Initial up to Max, and waits it on an injected
// clock, bounded by a context.
//
// Usage loop:
//
//	bo := retry.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}
//	for {
//		if err := try(); err == nil || !retryable(err) {
//			return err
//		}
//		if err := bo.Wait(ctx); err != nil {
//			return fmt.Errorf("...: %w", err) // ctx is done
//		}
//	}
//
// A loop that logs the coming delay calls Next, logs it, then Sleep; a
// loop that succeeds and goes on (an accept loop) calls Reset.
//
// Invariants:
//
//  1. Next returns Initial first (after Reset too), then twice the last
//     delay, never more than max(Max, Initial) and never negative; with
//     Initial == Max the delay is constant, with Initial == 0 it is zero.
//  2. Sleep and Wait return nil only once After's channel has delivered,
//     and ctx.Err() as soon as ctx is done (at once when it already is,
//     without waiting).
//  3. The package reads no clock of its own: it waits only on After
//     (time.After when nil), so a test that sets After times nothing.
//
// Concurrency: a Backoff is one loop's state and is not safe for
// concurrent use; its zero value retries without waiting.
package retry
