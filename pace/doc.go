// Package pace decides how fast a broker's catch-up may move bytes: an
// AIMD controller over what the broker sees of its clients and its
// machine. It holds no clock, does no I/O and starts no goroutine: Step
// takes the State and one Input (what was seen over the last interval)
// and returns a Decision and the next State. The caller measures, steps
// and applies.
//
// # Usage
//
// The plugin steps it once a second when heal.backfill_bytes_per_second
// is "auto":
//
//	var st pace.State                 // the zero State: at Config.Start
//	for range ticker.C {
//		in := pace.Input{P99: p99, LatencyKnown: ok, Moved: received, Beside: sent,
//			Elapsed: time.Second, IO: io, CPU: cpu} // PSI "some avg10", Known false where absent
//		var d pace.Decision
//		d, st = pace.Step(cfg, st, in)
//		throttle.SetRate(d.Rate)     // 0: no cap
//	}
//
// # The rule
//
// A step is active when catch-up moved bytes under the rate (Input.Moved:
// under a target scope, the copies this broker received), busy when it moved
// only bytes the rate does not pace (Input.Beside: the copies it sent,
// each paced by its target), idle when it moved none. The rate answers
// only for what it paces: a busy step holds it, as an idle one does, but
// is no idle step (it learns no baseline and breaks a run of idle steps).
//
// One step, in this order:
//
//   - Latency: catch-up moved bytes (Input.Moved > 0), the client-facing
//     p99 over the interval is known, an idle baseline is known, the p99
//     is above Config.LatencyFactor times the baseline, and so it was on
//     Config.LatencySteps active steps in a row (State.Slow), or this one
//     step's p99 is above Config.SevereFactor times the baseline (the
//     first only when the p99 is also more than Config.LatencyMargin
//     above the baseline, the second more than Config.SevereMargin: a
//     small baseline's relative rise is noise): the
//     rate is halved (Reason Latency) and the count starts again. A slow
//     step short of both holds the rate (Reason Latency). The severe
//     factor is for heals of a few seconds, over before two slow seconds
//     in a row could be seen, and for stalls no noise explains.
//   - Pressure: the io or cpu pressure (PSI some avg10, where known) is
//     above Config.PressureLimit and, once an idle baseline for that
//     resource is known, more than Config.PressureRise points above it (a
//     machine that was this loaded before catch-up ran is not loaded by
//     catch-up: halving would cost the heal and give the clients nothing;
//     their latency still counts). While catch-up moves bytes the rate is
//     halved; while it is idle the rate is held (nothing of the pressure
//     is ours to give back, and a heal that starts must not start at the
//     floor because another process loaded the machine). Reason Pressure.
//   - Otherwise (Reason None), while catch-up moves bytes, the rate
//     grows: by Config.Step up to Config.Ceiling, or, with no ceiling,
//     doubles up to Unbounded, which is no cap at all (Decision.Rate 0).
//     After a cut (State.Hurt, the rate it was made at, at least
//     Config.Start), each step closes half the gap to that rate (at least
//     Config.Step, never past it), then probes above it, a Step first and
//     twice the distance each step after: the rate is back near where the
//     clients felt it within a few steps, slows down there, and finds out
//     whether it still hurts them (BIC's binary search and max probing),
//     instead of oscillating between half and double of it or crawling
//     back one Step at a time. While catch-up is
//     idle the rate is held; after
//     Config.IdleReset idle steps in a row it returns to Config.Start, so
//     that the next heal starts there and doubles each second while the
//     clients are unharmed: a heal over before the controller could react
//     (a second or two) cannot hit them at full speed.
//
// A halving starts from the lower of the rate and the rate catch-up
// actually moved over the interval (Moved / Elapsed), so a cut below an
// uncapped or unused rate takes effect at once.
//
// The idle baseline is learned from the inputs that say catch-up was idle
// (Moved == 0 and Beside == 0) with a known p99: the first sets it, each later one moves
// it 1/BaselineSettle of the way, so it is the typical idle p99. Steps with catch-up
// active never change it. An idle step less than Config.IdleReset idle
// steps after an active one (State.Gap: a pause between two copies of a
// heal, while other brokers' catch-up may still load the clients) may
// lower it but not raise it, so a heal does not teach the controller that
// its own harm is the clients' normal. Each resource's idle pressure baseline moves
// 1/PressureSettle of the way to the figure seen on each idle step (the
// first idle figure sets it); active steps leave it.
//
// # Invariants
//
//  1. Step is a pure function of (Config, State, Input): no clock, no
//     I/O, no randomness, no allocation.
//  2. Decision.Rate is 0 (no cap) or within [Config.Floor, the ceiling]:
//     never below the floor, so healing never stops; never above
//     Config.Ceiling when one is set (and then never 0).
//  3. While catch-up is active, the rate falls only for Reason Latency or
//     Pressure, and then by at most half (never below the floor); it
//     rises only for Reason None. While it is idle or busy the rate
//     changes only to return to Config.Start after Config.IdleReset idle
//     steps in a row (a busy step is not idle).
//  4. The baselines change only on idle steps (never on busy ones): the latency one with a
//     known p99 (and, within Config.IdleReset idle steps of an active
//     one, only downwards), a pressure one with a known figure.
//  5. Decision.AtFloor counts the consecutive active steps spent at the
//     floor: an idle step at the floor keeps it, any step above the floor
//     resets it to 0.
//  6. An unknown signal (LatencyKnown false, Signal.Known false) is
//     ignored: it neither lowers nor holds the rate.
//
// # Concurrency
//
// Step shares no memory with its caller beyond its arguments and results
// (all values): any number of goroutines may step their own States.
package pace
