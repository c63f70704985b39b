package kafkaload

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/internal/retry"
)

// ErrConfig marks a Config that Validate refuses.
var ErrConfig = errors.New("kafkaload: config")

// Config is a load: producers on one topic, and the consumer of the check.
type Config struct {
	// Seeds are the brokers' Kafka listeners (the bootstrap list).
	Seeds []string
	// TLS is the client's configuration for mutual TLS (a certificate of
	// the cluster CA); nil dials plaintext.
	TLS *tls.Config
	// Topic is created with Partitions partitions by Start when it does
	// not exist.
	Topic      string
	Partitions int32
	// Producers is the number of producer clients, each a kgo.Client of
	// its own (its own producer id) with kgo's defaults: idempotent,
	// acks=all, retried until acknowledged.
	Producers int
	// ValueBytes is the size of each record's value; Interval the pause
	// between two records of one producer; InFlight caps one producer's
	// records produced and not yet answered (the producer waits).
	ValueBytes int
	Interval   time.Duration
	InFlight   int
	// Group, when set, is the group of a consumer (kgo.ConsumerGroup)
	// reading the topic during the run and committing what it polled
	// every CommitInterval; Finish has it catch up to the high watermarks
	// and checks it (CheckGroup). "": no group consumer.
	Group          string
	CommitInterval time.Duration
	// Logger receives the load's few notices.
	Logger zerolog.Logger
}

// DefaultConfig is two producers of 256-byte records, one every 20 ms
// each, on one partition of topic "kafkaload"; the caller sets Seeds and
// TLS.
func DefaultConfig() Config {
	return Config{Topic: "kafkaload", Partitions: 1, Producers: 2, ValueBytes: 256, Interval: 20 * time.Millisecond,
		InFlight: 500, CommitInterval: 500 * time.Millisecond, Logger: zerolog.Nop()}
}

// Validate names the first field with a value the load cannot run with.
func (c Config) Validate() error {
	switch {
	case len(c.Seeds) == 0:
		return fmt.Errorf("%w: Seeds is empty: want the brokers' Kafka listeners", ErrConfig)
	case c.Topic == "":
		return fmt.Errorf("%w: Topic is empty", ErrConfig)
	case c.Partitions < 1:
		return fmt.Errorf("%w: Partitions = %d: want at least 1", ErrConfig, c.Partitions)
	case c.Producers < 1 || c.Producers > 999:
		return fmt.Errorf("%w: Producers = %d: want 1 to 999", ErrConfig, c.Producers)
	case c.ValueBytes < 0:
		return fmt.Errorf("%w: ValueBytes = %d: want 0 or more", ErrConfig, c.ValueBytes)
	case c.Interval <= 0:
		return fmt.Errorf("%w: Interval = %v: want more than zero", ErrConfig, c.Interval)
	case c.InFlight < 1:
		return fmt.Errorf("%w: InFlight = %d: want at least 1", ErrConfig, c.InFlight)
	case c.Group != "" && c.CommitInterval <= 0:
		return fmt.Errorf("%w: CommitInterval = %v with Group %q: want more than zero", ErrConfig, c.CommitInterval, c.Group)
	}
	return nil
}

// opts are the kgo options of every client of the load.
func (c Config) opts(extra ...kgo.Opt) []kgo.Opt {
	o := []kgo.Opt{kgo.SeedBrokers(c.Seeds...)}
	if c.TLS != nil {
		o = append(o, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	return append(o, extra...)
}

// History is what a load did: every acknowledged record, and the
// produces that failed (not acknowledged: allowed, and never checked).
type History struct {
	Acked []Record
	// Produced counts the records handed to the producers; Failed those
	// answered with an error (FirstFailure is the first error).
	Produced, Failed int
	FirstFailure     string
	// LongestStall is the longest time the load went without an
	// acknowledgement: from its start to the first, between two, from
	// the last to Stop. A figure of the run, never judged.
	LongestStall time.Duration
	// LongestStallFrom is when that longest gap began (the load's start
	// or the acknowledgement before it), to tie it to what happened then.
	LongestStallFrom time.Time
	// AckLatencies are the acknowledged records' times from Produce to
	// their acknowledgement, in the order they were acknowledged; AckTimes
	// when each was acknowledged (the same order).
	AckLatencies []time.Duration
	AckTimes     []time.Time
}

// Load is a running load. Start it, Stop it, then Check its history
// against Consume.
type Load struct {
	cfg     Config
	clients []*kgo.Client
	// stop ends the producers' loops; abandon fails the records still
	// buffered (Stop, once its flush is over).
	stop, abandon context.CancelFunc
	loops         sync.WaitGroup // the producers' loops
	promises      sync.WaitGroup // one per record produced and not answered
	group         *group         // the group consumer, nil without Config.Group

	mu      sync.Mutex
	hist    History   // protected by mu
	lastAck time.Time // the start, then the latest acknowledgement; protected by mu
}

// Start creates the topic (CreateTopics; one that exists is kept as it
// is) and starts the producers. ctx bounds the creation only; the
// producers run until Stop.
func Start(ctx context.Context, cfg Config) (*Load, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.createTopic(ctx); err != nil {
		return nil, err
	}
	l := &Load{cfg: cfg, lastAck: time.Now()}
	loopCtx, stop := context.WithCancel(context.Background())
	recCtx, abandon := context.WithCancel(context.Background())
	l.stop, l.abandon = stop, abandon
	if cfg.Group != "" {
		g, err := startGroup(cfg)
		if err != nil {
			l.Stop(ctx)
			return nil, err
		}
		l.group = g
	}
	for i := range cfg.Producers {
		cl, err := kgo.NewClient(cfg.opts(kgo.DefaultProduceTopic(cfg.Topic))...)
		if err != nil {
			l.Stop(ctx)
			if l.group != nil {
				l.group.close()
			}
			return nil, fmt.Errorf("kafkaload: producer %d: %w", i, err)
		}
		l.clients = append(l.clients, cl)
		l.loops.Add(1)
		go func() {
			defer l.loops.Done()
			l.produce(loopCtx, recCtx, i, cl)
		}()
	}
	cfg.Logger.Info().Int("producers", cfg.Producers).Str("topic", cfg.Topic).Str("group", cfg.Group).Strs("seeds", cfg.Seeds).Msg("kafka load started")
	return l, nil
}

// produce is producer i's loop: a record every Interval, keyed Key(i,
// seq), while fewer than InFlight of its records await an answer.
func (l *Load) produce(loopCtx, recCtx context.Context, i int, cl *kgo.Client) {
	slots := make(chan struct{}, l.cfg.InFlight)
	tick := time.NewTicker(l.cfg.Interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-loopCtx.Done():
			return
		case <-tick.C:
		}
		select {
		case <-loopCtx.Done():
			return
		case slots <- struct{}{}:
		}
		key := Key(i, seq)
		r := &kgo.Record{Key: key, Value: Value(key, l.cfg.ValueBytes)}
		l.mu.Lock()
		l.hist.Produced++
		l.mu.Unlock()
		l.promises.Add(1)
		sent := time.Now()
		cl.Produce(recCtx, r, func(r *kgo.Record, err error) {
			defer l.promises.Done()
			defer func() { <-slots }()
			l.answer(r, sent, err)
		})
	}
}

// answer records a produce's outcome; sent is when it was produced.
func (l *Load) answer(r *kgo.Record, sent time.Time, err error) {
	var rec Record
	if err == nil {
		rec = NewRecord(r.Topic, r.Partition, r.Offset, r.Key, r.Value)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.hist.Failed++
		if l.hist.FirstFailure == "" {
			l.hist.FirstFailure = fmt.Sprintf("%s: %v", r.Key, err)
		}
		return
	}
	now := time.Now()
	l.hist.Acked = append(l.hist.Acked, rec)
	l.hist.AckLatencies = append(l.hist.AckLatencies, now.Sub(sent))
	l.hist.AckTimes = append(l.hist.AckTimes, now)
	l.noteAck(now)
}

// noteAck grows LongestStall to the gap since the last acknowledgement.
// Callers hold mu.
func (l *Load) noteAck(now time.Time) {
	if gap := now.Sub(l.lastAck); gap > l.hist.LongestStall {
		l.hist.LongestStall, l.hist.LongestStallFrom = gap, l.lastAck
	}
	l.lastAck = now
}

// Stop ends the producers: no record is produced after it is called;
// those buffered are flushed (retried until acknowledged) until ctx ends,
// and any left then are failed. It returns the history; calling it again
// returns the same.
func (l *Load) Stop(ctx context.Context) History {
	if l.stop == nil {
		return l.history()
	}
	l.stop()
	l.mu.Lock()
	l.noteAck(time.Now())
	l.mu.Unlock()
	l.loops.Wait()
	var wg sync.WaitGroup
	for _, cl := range l.clients {
		wg.Go(func() {
			if err := cl.Flush(ctx); err != nil {
				l.cfg.Logger.Warn().Err(err).Msg("kafka load: records not acknowledged when stopped are counted failed")
			}
		})
	}
	wg.Wait()
	l.abandon()
	for _, cl := range l.clients {
		cl.Close()
	}
	l.promises.Wait()
	l.stop = nil
	h := l.history()
	l.cfg.Logger.Info().Int("produced", h.Produced).Int("acked", len(h.Acked)).Int("failed", h.Failed).Msg("kafka load stopped")
	return h
}

// AckLatenciesBetween is the latencies of the records acknowledged at or
// after from and before to, so far.
func (l *Load) AckLatenciesBetween(from, to time.Time) []time.Duration {
	lat, _ := l.AcksBetween(from, to)
	return lat
}

// AcksBetween is the latencies of the records acknowledged at or after
// from and before to, so far, and when each was acknowledged.
func (l *Load) AcksBetween(from, to time.Time) ([]time.Duration, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lat []time.Duration
	var ats []time.Time
	for i, at := range l.hist.AckTimes {
		if !at.Before(from) && at.Before(to) {
			lat, ats = append(lat, l.hist.AckLatencies[i]), append(ats, at)
		}
	}
	return lat, ats
}

func (l *Load) history() History {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.hist
	h.Acked = append([]Record(nil), l.hist.Acked...)
	h.AckLatencies = append([]time.Duration(nil), l.hist.AckLatencies...)
	h.AckTimes = append([]time.Time(nil), l.hist.AckTimes...)
	return h
}

// createTopic creates the topic with cfg.Partitions, retrying what a
// cluster still electing or starting answers, until ctx ends; a topic
// that exists is kept as it is.
func (c Config) createTopic(ctx context.Context) error {
	cl, err := kgo.NewClient(c.opts()...)
	if err != nil {
		return fmt.Errorf("kafkaload: creating topic %s: %w", c.Topic, err)
	}
	defer cl.Close()
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = c.Topic, c.Partitions, -1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 10000
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Topics) == 1 {
			err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
			if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
				return nil
			}
			if !kerr.IsRetriable(err) {
				return fmt.Errorf("kafkaload: creating topic %s with %d partitions: %w", c.Topic, c.Partitions, err)
			}
		}
		if werr := b.Wait(ctx); werr != nil {
			return fmt.Errorf("kafkaload: creating topic %s: %w (last: %v)", c.Topic, werr, err)
		}
	}
}
