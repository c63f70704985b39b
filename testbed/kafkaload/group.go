package kafkaload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/internal/retry"
)

// group is the load's group consumer (Config.Group): one kgo member of a
// consumer group (kgo.ConsumerGroup) reading the topic during the run
// from the group's committed offsets, or the start, and committing what
// it polled every CommitInterval. It commits synchronously from its poll
// loop, so its events are in the order it saw them.
type group struct {
	cfg    Config
	cl     *kgo.Client
	stop   context.CancelFunc // ends run
	wake   context.CancelFunc // interrupts a poll once the target is set
	done   chan struct{}      // closed when run returns
	caught chan struct{}      // closed by run once it consumed up to target and committed that

	mu     sync.Mutex
	events []GroupEvent    // protected by mu
	next   map[int32]int64 // one past the highest offset polled in each partition; protected by mu
	target map[int32]int64 // the ends to catch up to, set by finish; protected by mu
}

// startGroup joins the group and starts its poll loop.
func startGroup(cfg Config) (*group, error) {
	cl, err := kgo.NewClient(cfg.opts(kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.Topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, fmt.Errorf("kafkaload: group %s: %w", cfg.Group, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	wakeCtx, wake := context.WithCancel(runCtx)
	g := &group{cfg: cfg, cl: cl, stop: stop, wake: wake, done: make(chan struct{}), caught: make(chan struct{}), next: map[int32]int64{}}
	go g.run(runCtx, wakeCtx)
	return g, nil
}

// run polls and commits until runCtx ends or, once finish set a target,
// the member consumed up to it and committed.
func (g *group) run(runCtx, wakeCtx context.Context) {
	defer close(g.done)
	tick := time.NewTicker(g.cfg.CommitInterval)
	defer tick.Stop()
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for runCtx.Err() == nil {
		targeted, caught := g.caughtUp()
		if caught {
			err := g.commit(runCtx)
			if err == nil {
				close(g.caught)
				return
			}
			g.cfg.Logger.Warn().Err(err).Str("group", g.cfg.Group).Msg("kafka load: the group's last commit failed; retrying")
			if b.Wait(runCtx) != nil {
				return
			}
			continue
		}
		pctx := wakeCtx
		if targeted {
			pctx = runCtx
		}
		fs := g.cl.PollFetches(pctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				g.cfg.Logger.Debug().Err(err).Str("topic", topic).Int32("partition", p).Msg("kafka load: group fetch error (retried)")
			}
		})
		g.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			g.events = append(g.events, GroupEvent{Record: NewRecord(r.Topic, r.Partition, r.Offset, r.Key, r.Value)})
			g.next[r.Partition] = max(g.next[r.Partition], r.Offset+1)
		})
		g.mu.Unlock()
		select {
		case <-tick.C:
			if err := g.commit(runCtx); err != nil && runCtx.Err() == nil {
				g.cfg.Logger.Info().Err(err).Str("group", g.cfg.Group).Msg("kafka load: group commit failed (the next one retries)")
			}
		default:
		}
	}
}

// caughtUp says whether finish set a target, and whether every partition
// was polled up to it.
func (g *group) caughtUp() (targeted, caught bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.target == nil {
		return false, false
	}
	for p, end := range g.target {
		if g.next[p] < end {
			return true, false
		}
	}
	return true, true
}

// commit commits the offsets polled and not committed, synchronously,
// and records each partition the coordinator acknowledged.
func (g *group) commit(ctx context.Context) error {
	offs := g.cl.UncommittedOffsets()
	if len(offs) == 0 {
		return nil
	}
	var errs []error
	g.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		asked := map[int32]int64{}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				asked[p.Partition] = p.Offset
			}
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("partition %d: %w", p.Partition, err))
					continue
				}
				g.events = append(g.events, GroupEvent{Commit: &Commit{Partition: p.Partition, Offset: asked[p.Partition]}})
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafkaload: group %s: commit: %w", g.cfg.Group, err)
	}
	return nil
}

// finish has the member consume up to ends and commit, until ctx ends;
// then stops it, fetches the group's committed offsets and leaves. The
// history is what it did however far it got; the error says where it
// stopped short.
func (g *group) finish(ctx context.Context, ends map[int32]int64) (GroupHistory, error) {
	g.mu.Lock()
	g.target = map[int32]int64{}
	for p, e := range ends {
		g.target[p] = e
	}
	g.mu.Unlock()
	g.wake()
	var errs []error
	select {
	case <-g.caught:
	case <-ctx.Done():
		g.mu.Lock()
		errs = append(errs, fmt.Errorf("kafkaload: group %s: consumed up to %v of high watermarks %v: %w", g.cfg.Group, g.next, ends, ctx.Err()))
		g.mu.Unlock()
	}
	g.stop()
	<-g.done
	final, err := g.cfg.committed(ctx)
	errs = append(errs, err)
	g.cl.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupHistory{Group: g.cfg.Group, Events: g.events, Final: final}, errors.Join(errs...)
}

// close stops the member without catching up (Start failed).
func (g *group) close() {
	g.stop()
	<-g.done
	g.cl.Close()
}

// committed fetches the group's committed offsets of the topic's
// partitions (OffsetFetch through its coordinator), retrying until ctx
// ends; a partition without a commit is absent.
func (c Config) committed(ctx context.Context) (map[int32]int64, error) {
	cl, err := kgo.NewClient(c.opts()...)
	if err != nil {
		return nil, fmt.Errorf("kafkaload: group %s: committed offsets: %w", c.Group, err)
	}
	defer cl.Close()
	out, err := untilAnswered(ctx, func() (map[int32]int64, error) { return c.fetchCommitted(ctx, cl) })
	if err != nil {
		return nil, fmt.Errorf("kafkaload: group %s: committed offsets: %w", c.Group, err)
	}
	return out, nil
}

// fetchCommitted is one try of committed.
func (c Config) fetchCommitted(ctx context.Context, cl *kgo.Client) (map[int32]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = c.Group // Topics nil: every committed partition
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = c.Group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return nil, err
	}
	code, topics := resp.ErrorCode, resp.Topics
	if len(resp.Groups) > 0 { // v8+
		code, topics = resp.Groups[0].ErrorCode, nil
		for _, gt := range resp.Groups[0].Topics {
			t := kmsg.OffsetFetchResponseTopic{Topic: gt.Topic}
			for _, gp := range gt.Partitions {
				t.Partitions = append(t.Partitions, kmsg.OffsetFetchResponseTopicPartition{Partition: gp.Partition, Offset: gp.Offset, ErrorCode: gp.ErrorCode})
			}
			topics = append(topics, t)
		}
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range topics {
		if t.Topic != c.Topic {
			continue
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("partition %d: %w", p.Partition, err)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}
