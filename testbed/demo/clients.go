package demo

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// The --clients load (testbed/kafkaload): when it starts and stops, and
// what --keep prints (stage.Env counts its partition segments). Every judgement
// is kafkaload's.

const (
	// clientsTopic is the producers' topic. One partition: with rf 3 its
	// active segment sits on three brokers, which leaves a follower
	// holding no unsealed segment for the decommission stage on five.
	clientsTopic      = "demo-clients"
	clientsPartitions = 1
	// clientsGroup is the group of the consumer that reads the topic
	// during the run and commits (kafkaload's Config.Group).
	clientsGroup = "demo-clients-group"
	// manualTopic is the topic of the kcat line --keep prints.
	manualTopic = "hello"
	// clientsFlush bounds the flush of the records buffered when the run
	// ends; clientsCheck the read back of every partition.
	clientsFlush = 30 * time.Second
	clientsCheck = 2 * time.Minute
)

// startClients starts the --clients load on the Kafka listeners: the
// producers and a group consumer; nothing with --clients 0.
func (d *demo) startClients(ctx context.Context) error {
	if d.o.Clients == 0 {
		return nil
	}
	cfg := kafkaload.DefaultConfig()
	cfg.Seeds, cfg.Topic, cfg.Partitions, cfg.Producers = d.env.C.KafkaSeeds(), clientsTopic, clientsPartitions, d.o.Clients
	cfg.Group = clientsGroup
	tlsCfg, err := d.env.C.KafkaTLS()
	if err != nil {
		return err
	}
	cfg.TLS = tlsCfg
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	l, err := kafkaload.Start(sctx, cfg)
	if err != nil {
		return fmt.Errorf("--clients %d: %w", d.o.Clients, err)
	}
	d.clients = l
	d.logf("clients: %d Kafka producers (kgo: idempotent, acks=all, mutual TLS as role client) and a consumer of group %s (kgo.ConsumerGroup, committing every %v) on topic %s through %s",
		d.o.Clients, clientsGroup, cfg.CommitInterval, clientsTopic, strings.Join(cfg.Seeds, ","))
	return nil
}

// finishClients stops the load, reads every record back and checks it;
// the report's clients section is the result. Any violation fails the
// run (Report.finish), and with the nemesis is one of its violations.
func (d *demo) finishClients(ctx context.Context) {
	if d.clients == nil {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, clientsFlush)
	hist := d.clients.Stop(fctx)
	cancel()
	cctx, cancel := context.WithTimeout(ctx, clientsCheck)
	defer cancel()
	d.logf("clients: producers stopped; reading every partition of %s back from offset 0, then group %s up to its end", clientsTopic, clientsGroup)
	rep := d.clients.Finish(cctx)
	d.rep.Clients = rep
	d.logf("clients: %d acknowledged, %d read back, %d lost, %d duplicated, %d out of order, %d committed offsets lost; %d produce failures",
		rep.Acknowledged, rep.ReadBack, rep.Lost, rep.Duplicated, rep.OutOfOrder, rep.CommitsLost(), rep.ProduceFailures)
	if n := d.rep.Nemesis; n != nil {
		n.Violations = append(n.Violations, rep.AllViolations()...)
		n.AttributeStalls(hist)
	}
	d.rep.attributeStalls(hist)
}

// kafkaManual is what --keep prints for producing by hand: the Kafka
// bootstrap list, the client certificate (role client) and a kcat line.
func (d *demo) kafkaManual() []string {
	seeds := d.env.C.KafkaSeeds()
	if len(seeds) == 0 {
		return nil
	}
	m := kafkaload.Manual{Seeds: seeds, Topic: manualTopic}
	out := []string{"  Kafka bootstrap: " + strings.Join(seeds, ",")}
	if !d.o.Insecure {
		dir := d.env.C.Certs().ClientDir()
		name := string(pki.RoleClient)
		m.CA, m.Cert, m.Key = filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.ClientCert(name)), filepath.Join(dir, pki.ClientKey(name))
		out = append(out, fmt.Sprintf("  Kafka client certificate (role %s): ca %s  cert %s  key %s", name, m.CA, m.Cert, m.Key))
	}
	return append(out, "  produce by hand, a record per line: "+m.Kcat(),
		fmt.Sprintf("  read it back: %s", strings.Replace(m.Kcat(), " -P", " -C -e -o beginning", 1)))
}
