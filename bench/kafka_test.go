package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/benchenv"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The Kafka benchmarks run a cluster of three real malachid processes
// (testbed/harness, rf 3, loopback) with a Kafka listener on each, and
// franz-go's kgo with its defaults (idempotent, acks=all, 10 ms linger,
// snappy tried on every batch) as the client. Each figure is set against
// a floor measured in the same round on the same bytes:
//
//   - produce: the store's own append loop (store.DB.Append, then Sync,
//     as cmd/malachid's appendFrame does) replaying the very frames the
//     round stored, read back from the leader's copy: each partition's
//     batches in order, each batch appended and synced on three stores
//     (three directories on the brokers' disk) at once, the partitions at
//     once; what an acks=all append must do, without network or protocol.
//   - fetch: the sealed segments' files sent whole over loopback TCP, a
//     stream per partition at once, by sendfile(2) (plaintext) or by
//     pread and a TLS 1.3 connection with the brokers' certificates (TLS:
//     Kafka itself cannot sendfile through TLS), to a reader that drains
//     them into a 1 MiB buffer.
//
// Records are 1 KiB of random bytes (snappy finds nothing to gain, so the
// bytes stored are the bytes produced). MALACHI_BENCH_KAFKA_MB sets the
// megabytes a produce round writes and the fetch fixture holds (default
// 64 and 96). MALACHID names a prebuilt binary; otherwise malachid is
// built once into the fixture directory, and the benchmarks skip when it
// cannot be.

const kafkaRecordBytes = 1024

var (
	malachidOnce sync.Once
	malachidBin  string
	malachidErr  error
)

// kafkaBinary returns the malachid binary, or skips b saying why it
// cannot be built.
func kafkaBinary(b *testing.B) string {
	malachidOnce.Do(func() {
		dir := filepath.Join(benchRoot(b), "kafka-bin")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		malachidBin, malachidErr = harness.LocateMalachid(ctx, os.Getenv("MALACHID"), dir, io.Discard)
	})
	if malachidErr != nil {
		b.Skipf("skipping: malachid cannot be built or found (set MALACHID to a binary): %v", malachidErr)
	}
	return malachidBin
}

// kafkaMB is MALACHI_BENCH_KAFKA_MB, or def.
func kafkaMB(def int) int {
	var mb int
	if _, err := fmt.Sscan(os.Getenv("MALACHI_BENCH_KAFKA_MB"), &mb); err == nil && mb > 0 {
		return mb
	}
	return def
}

// kafkaBench is a running three-broker cluster and a client config for it.
type kafkaBench struct {
	c    *harness.Cluster
	root string
	tls  *tls.Config // nil: plaintext (insecure = true)
}

// startKafka starts three brokers of rf 3 with a Kafka listener and the
// [kafka] table given, under the fixture directory (the repository's
// disk), mutual TLS unless insecure; it stops them when b ends.
func startKafka(b *testing.B, insecure bool, table string) *kafkaBench {
	bin := kafkaBinary(b)
	if err := os.MkdirAll(benchRoot(b), 0o755); err != nil {
		b.Fatal(err)
	}
	root, err := os.MkdirTemp(benchRoot(b), "kafka-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	c, err := harness.New(harness.Config{Bin: bin, Root: root, Brokers: 3, RF: 3, Insecure: insecure, Kafka: true, KafkaTable: table})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	if _, err := c.WaitReady(context.Background(), 60*time.Second); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitRegistered(context.Background(), 30*time.Second); err != nil {
		b.Fatal(err)
	}
	kb := &kafkaBench{c: c, root: root}
	if kb.tls, err = c.KafkaTLS(); err != nil {
		b.Fatal(err)
	}
	return kb
}

// client is a kgo client of the cluster with kgo's defaults and opts.
func (kb *kafkaBench) client(b *testing.B, opts ...kgo.Opt) *kgo.Client {
	opts = append([]kgo.Opt{kgo.SeedBrokers(kb.c.KafkaSeeds()...)}, opts...)
	if kb.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(kb.tls.Clone()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// chain is the partition's chain of segments as the metadata lists it.
func (kb *kafkaBench) chain(b *testing.B, topic string, p int32) []*meta.Segment {
	snap, err := kb.c.Brokers()[0].Client.Metadata(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return meta.NewView(snap).Chain(topic, p)
}

// copyPath is the path of segment s's copy on its first replica (the
// partition's leader while s is active, and the broker that serves its
// fetches while the partition keeps its replicas).
func (kb *kafkaBench) copyPath(b *testing.B, s *meta.Segment) string {
	p, err := kb.c.Broker(s.Replicas[0]).CopyPath(s.ID)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// produced is what one timed produce holds: the wall time from the first
// Produce call to the last acknowledgement, and each record's latency
// (Produce call to its promise).
type produced struct {
	wall    time.Duration
	latency []time.Duration
}

// randomValues returns n record values of kafkaRecordBytes random bytes.
func randomValues(n int, rng *rand.ChaCha8) [][]byte {
	values := make([][]byte, n)
	for i := range values {
		values[i] = make([]byte, kafkaRecordBytes)
		rng.Read(values[i])
	}
	return values
}

// produce writes values as records to topic, asynchronously (kgo's buffer and linger batch them) or, with oneByOne, one
// ProduceSync after another.
func produce(b *testing.B, cl *kgo.Client, topic string, values [][]byte, oneByOne bool) produced {
	out := produced{latency: make([]time.Duration, len(values))}
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for i, v := range values {
		t0 := time.Now()
		r := &kgo.Record{Topic: topic, Value: v}
		if oneByOne {
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				b.Fatalf("produce record %d: %v", i, err)
			}
			out.latency[i] = time.Since(t0)
			continue
		}
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			out.latency[i] = time.Since(t0)
			if err != nil {
				mu.Lock()
				firstErr = firstOf(firstErr, fmt.Errorf("record %d: %w", i, err))
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	out.wall = time.Since(start)
	if firstErr != nil {
		b.Fatalf("produce: %v", firstErr)
	}
	return out
}

// firstOf is a if it is not nil, else b.
func firstOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// copyFrames returns the payloads of the frames of the copy file at path
// from byte from (a frame boundary) to its end, a seal footer excluded.
func copyFrames(path string, from int64) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	end := int64(len(data))
	if end >= store.FooterSize {
		if _, ok := store.DecodeFooter(data[end-store.FooterSize:]); ok {
			end -= store.FooterSize
		}
	}
	var out [][]byte
	for pos := from; pos < end; {
		if end-pos < store.FrameHeaderSize {
			return nil, fmt.Errorf("%s: a torn frame header at byte %d of %d", path, pos, end)
		}
		n := int64(binary.LittleEndian.Uint32(data[pos+4 : pos+8]))
		if n == 0 || pos+store.FrameHeaderSize+n > end {
			return nil, fmt.Errorf("%s: frame at byte %d claims %d bytes of %d", path, pos, n, end-pos)
		}
		out = append(out, data[pos+store.FrameHeaderSize:pos+store.FrameHeaderSize+n])
		pos += store.FrameHeaderSize + n
	}
	return out, nil
}

// replicaFloor is three stores in directories of their own on the brokers'
// disk: the produce floor's replicas.
type replicaFloor struct {
	dbs [3]*store.DB
	seq int
}

func newReplicaFloor(b *testing.B, root string) *replicaFloor {
	f := &replicaFloor{}
	for i := range f.dbs {
		db, err := store.Open(filepath.Join(root, fmt.Sprintf("floor-r%d", i+1)), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		f.dbs[i] = db
	}
	return f
}

// replay appends every partition's batches in order as frames of a fresh
// copy on each of the three stores, each batch synced on all three (at
// once) before the next; the partitions run at once, or one after
// another with serial. It returns the wall time and each batch's latency.
func (f *replicaFloor) replay(parts [][][]byte, serial bool) (time.Duration, []time.Duration, error) {
	f.seq++
	lat := make([][]time.Duration, len(parts))
	errs := make([]error, len(parts))
	one := func(p int) {
		id := meta.SegmentID(fmt.Sprintf("floor-%d-%d", f.seq, p))
		for _, db := range f.dbs {
			if err := db.Create(id, 0); err != nil {
				errs[p] = err
				return
			}
		}
		for _, batch := range parts[p] {
			t0 := time.Now()
			var wg sync.WaitGroup
			var rerr [3]error
			for r, db := range f.dbs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := db.Append(id, batch); err != nil {
						rerr[r] = err
						return
					}
					rerr[r] = db.Sync(id)
				}()
			}
			wg.Wait()
			if err := errors.Join(rerr[:]...); err != nil {
				errs[p] = err
				return
			}
			lat[p] = append(lat[p], time.Since(t0))
		}
	}
	start := time.Now()
	if serial {
		for p := range parts {
			one(p)
		}
	} else {
		var wg sync.WaitGroup
		for p := range parts {
			wg.Add(1)
			go func() { defer wg.Done(); one(p) }()
		}
		wg.Wait()
	}
	wall := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return wall, all, errors.Join(errs...)
}

// drop removes the floor's copies of round seq (they are not read again).
func (f *replicaFloor) drop(parts int) {
	for p := range parts {
		for _, db := range f.dbs {
			_ = db.Delete(meta.SegmentID(fmt.Sprintf("floor-%d-%d", f.seq, p)))
		}
	}
}

// brokerCPU is the user and system CPU time of the cluster's malachid
// processes so far (/proc/<pid>/stat; 0 for a broker not running).
func (kb *kafkaBench) brokerCPU() time.Duration {
	var sum time.Duration
	for _, br := range kb.c.Brokers() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", br.Pid()))
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses.
		f := bytes.Fields(raw[bytes.LastIndexByte(raw, ')')+1:])
		var utime, stime int64
		if len(f) > 12 {
			fmt.Sscan(string(f[11]), &utime)
			fmt.Sscan(string(f[12]), &stime)
		}
		sum += time.Duration(utime+stime) * time.Second / clockTicks
	}
	return sum
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times
// (100 on Linux for every architecture Go supports).
const clockTicks = 100

// cpuMeter reads the brokers' and this process's CPU time around a phase.
type cpuMeter struct {
	kb           *kafkaBench
	broker, self time.Duration
}

func (kb *kafkaBench) meter() cpuMeter {
	return cpuMeter{kb, kb.brokerCPU(), benchenv.ProcessCPU()}
}

// since returns the brokers' and this process's CPU time since m.
func (m cpuMeter) since() (broker, self time.Duration) {
	return m.kb.brokerCPU() - m.broker, benchenv.ProcessCPU() - m.self
}

// perGB is d in seconds per 10^9 of n bytes.
func perGB(d time.Duration, n int64) float64 { return d.Seconds() / (float64(n) / 1e9) }

// quantile returns the q-quantile of d (sorted in place), in ms.
func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	v := make([]float64, len(d))
	for i, x := range d {
		v[i] = float64(x) / 1e6
	}
	median(v) // sorts v
	return v[min(int(q*float64(len(v))), len(v)-1)]
}

// BenchmarkKafkaProduce produces 1 KiB records to a topic of three
// partitions on three brokers (rf 3) with kgo's defaults, each iteration
// one round, against the store's append loop over the same frames
// (replicaFloor) in the same round:
//
//	mode=async  MALACHI_BENCH_KAFKA_MB megabytes (64) produced at once,
//	            kgo batching as it does (throughput)
//	mode=sync   200 records, one ProduceSync after another (latency);
//	            its floor replays the batches one after another
//
// listener=tls is the brokers' default (mutual TLS on the Kafka listener
// and between brokers); listener=plaintext runs them with insecure = true
// (every listener plaintext, loopback only).
//
// Metrics (medians over rounds): MB/s and records/s through Kafka, the
// records' produce latency p50/p99 (Produce call to acknowledgement: in
// mode=async it holds the wait in kgo's buffer), the floor's MB/s and its
// per-batch latency p50/p99, vs-floor (floor time / Kafka time in the
// same round: the fraction of the floor's throughput reached; the goal is
// >= 0.5), the mean batch in bytes, and load1 (one-minute load average at
// the end; each round's is logged with -v).
func BenchmarkKafkaProduce(b *testing.B) {
	for _, listener := range []string{"tls", "plaintext"} {
		for _, mode := range []string{"async", "sync"} {
			b.Run("listener="+listener+"/mode="+mode, func(b *testing.B) {
				benchKafkaProduce(b, listener == "plaintext", mode == "sync")
			})
		}
	}
}

func benchKafkaProduce(b *testing.B, insecure, oneByOne bool) {
	kb := startKafka(b, insecure, "num_partitions = 3\n")
	floor := newReplicaFloor(b, kb.root)
	const topic = "bench"
	cl := kb.client(b, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	defer cl.Close()
	rng := rand.NewChaCha8([32]byte{7})
	n := kafkaMB(64) << 20 / kafkaRecordBytes
	if oneByOne {
		n = 200
	}
	// Warm: the topic, the producer id and the connections.
	produce(b, cl, topic, randomValues(300, rng), false)
	var mbps, rps, p50, p99, fmbps, fp50, fp99, ratio, batch, kcpu, bcpu, ccpu, fcpu []float64
	b.ResetTimer()
	for round := range b.N {
		b.StopTimer()
		load, _ := benchenv.ReadLoad()
		from := kb.ends(b, topic)
		values := randomValues(n, rng)
		m := kb.meter()
		b.StartTimer()
		got := produce(b, cl, topic, values, oneByOne)
		b.StopTimer()
		brokers, client := m.since()
		parts, bytes := kb.framesSince(b, topic, from)
		m = kb.meter()
		fwall, flat, err := floor.replay(parts, oneByOne)
		if err != nil {
			b.Fatalf("floor: %v", err)
		}
		_, fself := m.since()
		bcpu, ccpu = append(bcpu, perGB(brokers, bytes)), append(ccpu, perGB(client, bytes))
		kcpu, fcpu = append(kcpu, perGB(brokers+client, bytes)), append(fcpu, perGB(fself, bytes))
		floor.drop(len(parts))
		batches := len(flat)
		mbps = append(mbps, float64(bytes)/got.wall.Seconds()/1e6)
		rps = append(rps, float64(n)/got.wall.Seconds())
		p50, p99 = append(p50, quantile(got.latency, 0.5)), append(p99, quantile(got.latency, 0.99))
		fmbps = append(fmbps, float64(bytes)/fwall.Seconds()/1e6)
		fp50, fp99 = append(fp50, quantile(flat, 0.5)), append(fp99, quantile(flat, 0.99))
		ratio = append(ratio, fwall.Seconds()/got.wall.Seconds())
		batch = append(batch, float64(bytes)/float64(batches))
		b.Logf("round %d load1 %.2f: kafka %.1f MB/s (%d batches, p50 %.2f ms p99 %.2f ms, cpu-s/GB brokers %.2f client %.2f), floor %.1f MB/s (p50 %.2f ms p99 %.2f ms, cpu-s/GB %.2f), vs-floor %.3f",
			round, load.One, mbps[round], batches, p50[round], p99[round], bcpu[round], ccpu[round], fmbps[round], fp50[round], fp99[round], fcpu[round], ratio[round])
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(median(mbps), "MB/s")
	b.ReportMetric(median(rps), "records/s")
	b.ReportMetric(median(p50), "p50-ms")
	b.ReportMetric(median(p99), "p99-ms")
	b.ReportMetric(median(fmbps), "floor-MB/s")
	b.ReportMetric(median(fp50), "floor-p50-ms")
	b.ReportMetric(median(fp99), "floor-p99-ms")
	b.ReportMetric(median(ratio), "vs-floor")
	b.ReportMetric(median(batch), "B/batch")
	b.ReportMetric(median(kcpu), "cpu-s/GB")
	b.ReportMetric(median(bcpu), "broker-cpu-s/GB")
	b.ReportMetric(median(ccpu), "client-cpu-s/GB")
	b.ReportMetric(median(fcpu), "floor-cpu-s/GB")
	benchenv.ReportLoad(b)
}

// partEnd is where a partition's active segment ended before a round.
type partEnd struct {
	seg   meta.SegmentID
	bytes int64
}

// ends returns, for each of topic's three partitions, its active segment
// and the size of the leader's copy now.
func (kb *kafkaBench) ends(b *testing.B, topic string) []partEnd {
	out := make([]partEnd, 3)
	for p := range out {
		chain := kb.chain(b, topic, int32(p))
		if len(chain) == 0 {
			b.Fatalf("%s/%d has no segment", topic, p)
		}
		last := chain[len(chain)-1]
		fi, err := os.Stat(kb.copyPath(b, last))
		if err != nil {
			b.Fatal(err)
		}
		out[p] = partEnd{last.ID, fi.Size()}
	}
	return out
}

// framesSince returns each partition's frames stored since from (the
// round's batches, as the leader's copy holds them) and their payload
// bytes in all. A partition that rolled during the round fails b: the
// produce benchmark's segments (1 GiB) hold every round.
func (kb *kafkaBench) framesSince(b *testing.B, topic string, from []partEnd) ([][][]byte, int64) {
	parts := make([][][]byte, len(from))
	var total int64
	for p, f := range from {
		chain := kb.chain(b, topic, int32(p))
		last := chain[len(chain)-1]
		if last.ID != f.seg {
			b.Fatalf("%s/%d rolled from %s to %s during the round", topic, p, f.seg, last.ID)
		}
		frames, err := copyFrames(kb.copyPath(b, last), f.bytes)
		if err != nil {
			b.Fatal(err)
		}
		for _, fr := range frames {
			total += int64(len(fr))
		}
		parts[p] = frames
	}
	return parts, total
}

// sealedPart is a partition's sealed segments: their files on the broker
// that serves the partition's fetches, the Kafka offset at their end and
// the record-batch bytes they hold.
type sealedPart struct {
	files []string
	end   int64
	bytes int64
}

// sealed returns the sealed segments of topic's three partitions.
func (kb *kafkaBench) sealed(b *testing.B, topic string) []sealedPart {
	out := make([]sealedPart, 3)
	for p := range out {
		chain := kb.chain(b, topic, int32(p))
		lead := chain[len(chain)-1]
		for _, s := range chain {
			if !s.Sealed {
				continue
			}
			path, err := kb.c.Broker(lead.Replicas[0]).CopyPath(s.ID)
			if err != nil {
				b.Fatal(err)
			}
			frames, err := copyFrames(path, 0)
			if err != nil {
				b.Fatal(err)
			}
			for _, fr := range frames {
				h, _, err := kafka.ParseBatch(fr)
				if err != nil {
					b.Fatalf("%s: %v", path, err)
				}
				out[p].end = h.BaseOffset + int64(h.Records())
				out[p].bytes += int64(len(fr))
			}
			out[p].files = append(out[p].files, path)
		}
		if len(out[p].files) == 0 {
			b.Fatalf("%s/%d has no sealed segment", topic, p)
		}
	}
	return out
}

// BenchmarkKafkaFetch consumes the sealed segments of a topic of three
// partitions (MALACHI_BENCH_KAFKA_MB megabytes, 96 by default, in 8 MiB
// segments, produced untimed) from offset 0 with a kgo consumer
// (ConsumePartitions, its defaults: 1 MiB per partition, 50 MiB per
// fetch), each iteration one round, against a floor in the same round:
// the same files sent over loopback, a stream per partition at once
// (sendfile(2) with listener=plaintext; pread and a TLS 1.3 connection
// with the brokers' certificates with listener=tls).
//
// Metrics (medians over rounds): MB/s of record batches consumed, the
// floor's MB/s, vs-floor (floor time / Kafka time in the same round; the
// goal is >= 0.8), and load1 (each round's is logged with -v).
func BenchmarkKafkaFetch(b *testing.B) {
	for _, listener := range []string{"plaintext", "tls"} {
		b.Run("listener="+listener, func(b *testing.B) { benchKafkaFetch(b, listener == "plaintext") })
	}
}

func benchKafkaFetch(b *testing.B, insecure bool) {
	kb := startKafka(b, insecure, "num_partitions = 3\nsegment_bytes = 8388608\n")
	const topic = "fetch"
	cl := kb.client(b, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	produce(b, cl, topic, randomValues(kafkaMB(96)<<20/kafkaRecordBytes, rand.NewChaCha8([32]byte{9})), false)
	cl.Close()
	parts := kb.sealed(b, topic)
	var fileBytes, batchBytes int64
	for _, p := range parts {
		batchBytes += p.bytes
		for _, f := range p.files {
			fi, err := os.Stat(f)
			if err != nil {
				b.Fatal(err)
			}
			fileBytes += fi.Size()
		}
	}
	var serverTLS *tls.Config
	if !insecure {
		certs, err := pki.LoadBroker(kb.c.Certs().BrokerDir(1))
		if err != nil {
			b.Fatal(err)
		}
		serverTLS = certs.ServerConfig()
	}
	var mbps, fmbps, ratio, kcpu, bcpu, ccpu, fcpu []float64
	b.ResetTimer()
	for round := range b.N {
		b.StopTimer()
		load, _ := benchenv.ReadLoad()
		m := kb.meter()
		b.StartTimer()
		kwall := kb.consume(b, topic, parts)
		b.StopTimer()
		brokers, client := m.since()
		m = kb.meter()
		fwall, err := sendFiles(parts, serverTLS, kb.tls)
		if err != nil {
			b.Fatalf("floor: %v", err)
		}
		_, fself := m.since()
		bcpu, ccpu = append(bcpu, perGB(brokers, batchBytes)), append(ccpu, perGB(client, batchBytes))
		kcpu, fcpu = append(kcpu, perGB(brokers+client, batchBytes)), append(fcpu, perGB(fself, fileBytes))
		mbps = append(mbps, float64(batchBytes)/kwall.Seconds()/1e6)
		fmbps = append(fmbps, float64(fileBytes)/fwall.Seconds()/1e6)
		ratio = append(ratio, mbps[round]/fmbps[round])
		b.Logf("round %d load1 %.2f: kafka %.1f MB/s (cpu-s/GB brokers %.2f client %.2f), floor %.1f MB/s (cpu-s/GB %.2f), vs-floor %.3f",
			round, load.One, mbps[round], bcpu[round], ccpu[round], fmbps[round], fcpu[round], ratio[round])
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(median(mbps), "MB/s")
	b.ReportMetric(median(fmbps), "floor-MB/s")
	b.ReportMetric(median(ratio), "vs-floor")
	b.ReportMetric(float64(batchBytes)/1e6, "MB/round")
	b.ReportMetric(median(kcpu), "cpu-s/GB")
	b.ReportMetric(median(bcpu), "broker-cpu-s/GB")
	b.ReportMetric(median(ccpu), "client-cpu-s/GB")
	b.ReportMetric(median(fcpu), "floor-cpu-s/GB")
	benchenv.ReportLoad(b)
}

// consume reads every partition of topic from offset 0 to the end of its
// sealed segments with a new kgo consumer and returns the wall time from
// the moment it is given the partitions (its bootstrap, a Ping, is not
// timed; its metadata request and its connections to the leaders are);
// every record's offset must follow the last.
func (kb *kafkaBench) consume(b *testing.B, topic string, parts []sealedPart) time.Duration {
	offsets := map[int32]kgo.Offset{}
	for p := range parts {
		offsets[int32(p)] = kgo.NewOffset().At(0)
	}
	cl := kb.client(b)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		b.Fatalf("consumer: %v", err)
	}
	next := make([]int64, len(parts))
	left := len(parts)
	start := time.Now()
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("consume: %v (at offsets %v of %v)", err, next, parts)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("consume %s/%d: %v", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			p := r.Partition
			if r.Offset != next[p] {
				b.Fatalf("consume %s/%d: offset %d after %d", topic, p, r.Offset, next[p]-1)
			}
			next[p]++
			if next[p] == parts[p].end {
				left--
			}
		})
	}
	return time.Since(start)
}

// sendFiles sends each partition's files over a loopback TCP connection
// of its own, all at once, to a reader draining them into a 1 MiB buffer:
// by sendfile(2) (io.Copy from an *os.File to a *net.TCPConn) without
// TLS, else by pread into a 1 MiB buffer and a TLS connection. It returns
// the wall time, dials and handshakes included.
func sendFiles(parts []sealedPart, server, client *tls.Config) (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	errs := make([]error, 2*len(parts))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range parts {
		wg.Add(2)
		go func() { // the sender
			defer wg.Done()
			nc, err := ln.Accept()
			if err != nil {
				errs[2*i] = err
				return
			}
			defer nc.Close()
			errs[2*i] = sendSide(nc, parts, server)
		}()
		go func() { // the reader
			defer wg.Done()
			errs[2*i+1] = readSide(ln.Addr().String(), i, parts[i], client)
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// sendSide reads which partition the peer wants (one byte) and sends its
// files.
func sendSide(nc net.Conn, parts []sealedPart, server *tls.Config) error {
	var w io.Writer = nc
	var r io.Reader = nc
	if server != nil {
		tc := tls.Server(nc, server)
		w, r = tc, tc
	}
	var which [1]byte
	if _, err := io.ReadFull(r, which[:]); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for _, path := range parts[which[0]].files {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		if server == nil {
			_, err = io.Copy(w, f) // *net.TCPConn.ReadFrom: sendfile
		} else {
			_, err = io.CopyBuffer(w, struct{ io.Reader }{f}, buf)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// readSide asks for partition i's files and reads them all.
func readSide(addr string, i int, part sealedPart, client *tls.Config) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	var rw io.ReadWriter = nc
	if client != nil {
		rw = tls.Client(nc, client.Clone())
	}
	if _, err := rw.Write([]byte{byte(i)}); err != nil {
		return err
	}
	var want int64
	for _, path := range part.files {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		want += fi.Size()
	}
	buf := make([]byte, 1<<20)
	var got int64
	for got < want {
		n, err := rw.Read(buf)
		got += int64(n)
		if err != nil {
			return fmt.Errorf("partition %d: read %d of %d bytes: %w", i, got, want, err)
		}
	}
	return nil
}
