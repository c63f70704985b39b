package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// The Kafka listener (kafka_listen): kafkaCluster is the kafka.Cluster of
// this broker over the metadata (topics, partition chains, brokers), and
// partLog (kafka_log.go) the kafka.Log of a partition it leads: the first
// replica of the partition's active segment.

// kafkaCluster implements kafka.Cluster for one broker.
type kafkaCluster struct {
	b *Server

	mu   sync.Mutex
	logs map[partKey]*partLog // the Log of each partition led here; protected by mu
	live *liveness            // which brokers count as live (kafka_live.go)

	pidMu           sync.Mutex
	pidNext, pidEnd int64 // the producer id block in use; protected by pidMu
}

type partKey struct {
	topic string
	index int32
}

var _ kafka.Cluster = (*kafkaCluster)(nil)

// startKafka opens kafka_listen and serves it until Close; it records the
// listener's address for register. With insecure it serves plaintext
// (checkInsecure kept it on loopback).
func (b *Server) startKafka() error {
	kc := &kafkaCluster{b: b, logs: map[partKey]*partLog{}}
	kc.startLive()
	cfg := kafka.DefaultConfig()
	cfg.AutoCreateTopics, cfg.NumPartitions = b.cfg.Kafka.AutoCreateTopics, b.cfg.Kafka.NumPartitions
	cfg.Logger = b.log.With().Str("component", "kafka").Logger()
	cfg.Latency = b.clientLatency
	if b.certs != nil {
		certs := b.certs
		cfg.TLS = certs.ServerConfig()
		cfg.Authorize = func(cs tls.ConnectionState) (pki.Identity, error) { return certs.VerifyPeer(cs.PeerCertificates) }
	} else {
		cfg.Insecure = true
	}
	srv, err := kafka.NewServer(cfg, kc)
	if err != nil {
		return fmt.Errorf("malachid: kafka: %w", err)
	}
	ln, err := net.Listen("tcp", b.cfg.KafkaListen)
	if err != nil {
		return fmt.Errorf("malachid: kafka_listen = %q: %w", b.cfg.KafkaListen, err)
	}
	b.kafkaAddr = ln.Addr().String()
	b.kafka = kc
	b.closers = append(b.closers, srv.Close)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, kafka.ErrClosed) {
			b.log.Error().Err(err).Msg("kafka listener stopped")
		}
	}()
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		kc.keep(b.bgCtx)
	}()
	b.log.Info().Str("addr", b.kafkaAddr).Bool("tls", cfg.TLS != nil).Msg("kafka listener serving")
	return nil
}

// Self implements kafka.Cluster.
func (kc *kafkaCluster) Self() int32 { return int32(kc.b.self) }

// Brokers implements kafka.Cluster: the registered brokers with a Kafka
// listener that count as live (kafka_live.go).
func (kc *kafkaCluster) Brokers() []kafka.BrokerAddr {
	var out []kafka.BrokerAddr
	for _, br := range kc.b.node.View().Brokers() {
		if !kc.live.ok(br.ID) {
			continue
		}
		host, port, err := net.SplitHostPort(br.KafkaAddr)
		if err != nil {
			continue
		}
		p, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			continue
		}
		out = append(out, kafka.BrokerAddr{NodeID: int32(br.ID), Host: host, Port: int32(p), Rack: br.Rack})
	}
	return out
}

// Topics implements kafka.Cluster. A partition's leader is the first
// replica of its active segment, -1 while it has none (being created or
// rolled) or that replica counts dead; its leader epoch is the active
// segment's seq.
func (kc *kafkaCluster) Topics() []kafka.TopicInfo {
	v := kc.b.node.View()
	out := make([]kafka.TopicInfo, 0, len(v.Topics()))
	for _, tp := range v.Topics() {
		ti := kafka.TopicInfo{Name: tp.Name, Partitions: make([]kafka.PartitionInfo, tp.Partitions)}
		for p := range tp.Partitions {
			pi := kafka.PartitionInfo{Index: p, Leader: -1}
			if chain := v.Chain(tp.Name, p); len(chain) > 0 {
				last := chain[len(chain)-1]
				_, _, seq, _ := meta.ParsePartitionSegment(last.ID)
				pi.LeaderEpoch = int32(seq)
				for _, r := range last.Replicas {
					pi.Replicas = append(pi.Replicas, int32(r))
				}
				if !last.Sealed && len(last.Replicas) > 0 && kc.live.ok(last.Replicas[0]) {
					pi.Leader = int32(last.Replicas[0])
				}
			}
			ti.Partitions[p] = pi
		}
		out = append(out, ti)
	}
	return out
}

// CreateTopic implements kafka.Cluster: the CreateTopic command, then the
// first segment of each partition, placed by the control plane's leader
// as any segment is; it returns once this broker's metadata lists them.
// A partition whose segment could not be created is created later by
// the keeper on the leader.
func (kc *kafkaCluster) CreateTopic(ctx context.Context, name string, partitions int32) error {
	if err := meta.ValidateTopicName(name); err != nil {
		return fmt.Errorf("%w: %w", kafka.ErrInvalidTopic, err)
	}
	if partitions < 1 || partitions > meta.MaxPartitions {
		return fmt.Errorf("%w: %d: want 1 to %d", kafka.ErrInvalidPartitions, partitions, meta.MaxPartitions)
	}
	b := kc.b
	if _, err := b.apply(ctx, meta.CreateTopic{Topic: meta.Topic{Name: name, Partitions: partitions}}); err != nil {
		if errors.Is(err, meta.ErrTopicExists) {
			return fmt.Errorf("%w: %w", kafka.ErrTopicExists, err)
		}
		return err
	}
	for p := range partitions {
		id := meta.PartitionSegmentID(name, p, 0)
		if _, err := b.create(ctx, admin.CreateRequest{ID: id}); err != nil {
			return fmt.Errorf("create topic %s: partition %d: %w", name, p, err)
		}
	}
	for {
		v := b.node.View()
		if len(v.Chain(name, partitions-1)) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: waiting for the metadata: %w", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Partition implements kafka.Cluster: the Log of a partition whose active
// segment names this broker first. The same *partLog is returned until it
// steps down (a failed append rolled the partition onto a segment led by
// another broker, or another broker sealed it).
func (kc *kafkaCluster) Partition(topic string, index int32) (kafka.Log, error) {
	v := kc.b.node.View()
	tp, ok := v.Topic(topic)
	if !ok || index < 0 || index >= tp.Partitions {
		return nil, fmt.Errorf("%w: %s/%d", kafka.ErrUnknownTopicOrPartition, topic, index)
	}
	key := partKey{topic, index}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if l := kc.logs[key]; l != nil && l.leading() {
		return l, nil
	}
	delete(kc.logs, key)
	chain := v.Chain(topic, index)
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: %s/%d has no segment yet", kafka.ErrNotLeader, topic, index)
	}
	last := chain[len(chain)-1]
	if last.Sealed || len(last.Replicas) == 0 || last.Replicas[0] != kc.b.self {
		return nil, fmt.Errorf("%w: %s/%d: active segment %s (sealed %v) is led by %v", kafka.ErrNotLeader, topic, index, last.ID, last.Sealed, last.Replicas)
	}
	l, err := openPartLog(kc.b, topic, index, chain)
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%d: %w", kafka.ErrNotLeader, topic, index, err)
	}
	kc.logs[key] = l
	return l, nil
}

// NewProducerID implements kafka.Cluster: ids from a block reserved by
// AllocateProducerIDs, whose log index names it (meta invariant 10).
func (kc *kafkaCluster) NewProducerID(ctx context.Context) (int64, error) {
	kc.pidMu.Lock()
	defer kc.pidMu.Unlock()
	if kc.pidNext == kc.pidEnd {
		idx, err := kc.b.apply(ctx, meta.AllocateProducerIDs{Broker: kc.b.self})
		if err != nil {
			return 0, fmt.Errorf("allocate producer ids: %w", err)
		}
		kc.pidNext = meta.ProducerIDBlock(idx)
		kc.pidEnd = kc.pidNext + meta.ProducerIDBlockSize
	}
	id := kc.pidNext
	kc.pidNext++
	return id, nil
}
