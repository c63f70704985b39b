package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/probe"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/errorfs"
)

// leftoverServer is broker 1's server over a store of four copies: "in"
// (sealed, in its set), "out" (sealed, a set without broker 1), "part" (a
// partial copy of a sealed segment without broker 1) and "orphan" (a
// segment the metadata does not know).
func leftoverServer(t *testing.T, inj errorfs.Injector) (*server, *memCP) {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{FS: errorfs.Wrap(store.OSFS(), inj)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cp := newMemCP()
	for i := 1; i <= 3; i++ {
		cp.must(t, meta.RegisterBroker{Broker: meta.Broker{ID: meta.BrokerID(i)}})
	}
	for _, c := range []struct {
		id       meta.SegmentID
		replicas []meta.BrokerID
		seal     bool
	}{{"in", []meta.BrokerID{1, 2}, true}, {"out", []meta.BrokerID{2, 3}, true}, {"part", []meta.BrokerID{2, 3}, false}, {"orphan", nil, true}} {
		if err := db.Create(c.id, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Append(c.id, []byte(strings.Repeat("x", 100))); err != nil {
			t.Fatal(err)
		}
		s := store.Seal{}
		if c.seal {
			if s, err = db.Seal(c.id); err != nil {
				t.Fatal(err)
			}
		} else if err := db.Sync(c.id); err != nil {
			t.Fatal(err)
		}
		if c.replicas == nil {
			continue
		}
		cp.must(t, meta.CreateSegment{Segment: meta.Segment{ID: c.id, Replicas: c.replicas, Checksum: meta.NoChecksum}})
		if !c.seal { // sealed in the metadata at twice the bytes this copy has
			s = store.Seal{Length: 2, ByteSize: 2 * (100 + 16), Checksum: meta.CRC32C(1)}
		}
		cp.must(t, meta.SealSegment{ID: c.id, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum})
	}
	pr, err := probe.New(probe.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	return &server{self: 1, db: db, cp: cp, stat: proberStatter{pr}, cfg: DefaultConfig(), log: zerolog.Nop()}, cp
}

func leftoverMap(t *testing.T, s *server, cp *memCP) map[meta.SegmentID]heal.Leftover {
	t.Helper()
	rep, err := s.probeView(context.Background(), cp.View())
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	m := map[meta.SegmentID]heal.Leftover{}
	for _, l := range rep.Leftovers {
		m[l.Segment] = l
	}
	if rep.Copies != 1 {
		t.Fatalf("probe counts %d copies, want 1 (the leftovers are not replicas)", rep.Copies)
	}
	return m
}

// The probe reports every copy outside its set with its size and footer,
// and nothing of the copy in its set; the list is recomputed when a copy
// goes.
func TestProbeReportsLeftovers(t *testing.T) {
	s, cp := leftoverServer(t, nil)
	m := leftoverMap(t, s, cp)
	if len(m) != 3 {
		t.Fatalf("leftovers %+v, want out, part, orphan", m)
	}
	if l := m["out"]; !l.Footer || l.Size != 100+16+store.FooterSize {
		t.Fatalf("out: %+v, want a footer and %d bytes", l, 100+16+store.FooterSize)
	}
	if l := m["part"]; l.Footer {
		t.Fatalf("part: %+v, want no footer", l)
	}
	view := cp.View()
	for id, want := range map[meta.SegmentID]heal.Cause{"out": heal.ReturnedBroker, "part": heal.PartialBackfill, "orphan": heal.FailedLoad} {
		l := m[id]
		if got := heal.ClassifyLeftover(view, 1, &l); got != want {
			t.Errorf("%s: cause %s, want %s", id, got, want)
		}
	}
	if _, err := s.deleteLeftover(context.Background(), mustJSON(t, DeleteLeftoverRequest{Segment: "orphan", Index: view.Index()})); err != nil {
		t.Fatal(err)
	}
	if m := leftoverMap(t, s, cp); len(m) != 2 || m["orphan"].Segment != "" {
		t.Fatalf("after the delete: %+v", m)
	}
}

// The broker refuses to delete a copy its set names, at the index asked
// or a later one.
func TestDeleteLeftoverRefusesAReplica(t *testing.T) {
	s, cp := leftoverServer(t, nil)
	index := cp.View().Index()
	_, err := s.deleteLeftover(context.Background(), mustJSON(t, DeleteLeftoverRequest{Segment: "in", Index: index}))
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "in its replica set") {
		t.Fatalf("delete of a replica: %v, want a refusal naming the set", err)
	}
	// "out" joins broker 1's set after the plan was made: refused too.
	cp.must(t, meta.SetSegmentReplicas{ID: "out", Expected: []meta.BrokerID{2, 3}, Replicas: []meta.BrokerID{2, 3, 1}})
	if _, err := s.deleteLeftover(context.Background(), mustJSON(t, DeleteLeftoverRequest{Segment: "out", Index: index})); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("delete of a copy that became a replica: %v", err)
	}
	if _, err := s.db.Tail("in"); err != nil {
		t.Fatalf("the replica is gone: %v", err)
	}
}

// A failed delete is reported with its errno text until a delete succeeds.
func TestDeleteLeftoverFailureReported(t *testing.T) {
	var deny bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if deny && op.Kind == errorfs.Remove {
			return syscall.EPERM
		}
		return nil
	})
	s, cp := leftoverServer(t, inj)
	deny = true
	body := mustJSON(t, DeleteLeftoverRequest{Segment: "out", Index: cp.View().Index()})
	if _, err := s.deleteLeftover(context.Background(), body); err == nil {
		t.Fatal("delete succeeded through EPERM")
	}
	if l := leftoverMap(t, s, cp)["out"]; !strings.Contains(l.DeleteErr, "operation not permitted") {
		t.Fatalf("out: %+v, want the delete's errno text", l)
	}
	if l := leftoverMap(t, s, cp)["out"]; heal.ClassifyLeftover(cp.View(), 1, &l) != heal.FailedDelete {
		t.Fatalf("out: not a failed delete")
	}
	deny = false
	if _, err := s.deleteLeftover(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	if l, ok := leftoverMap(t, s, cp)["out"]; ok {
		t.Fatalf("out still listed after its delete: %+v", l)
	}
}

func TestSetLeftoverGauge(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_leftover_copies"}, []string{"cause"})
	rep := heal.Report{Leftovers: []heal.LeftoverGroup{
		{Broker: 1, Cause: heal.ReturnedBroker, Copies: 3},
		{Broker: 2, Cause: heal.ReturnedBroker, Copies: 2},
		{Broker: 2, Cause: heal.FailedDelete, Copies: 1},
	}}
	setLeftoverGauge(&rep, g)
	for cause, want := range map[string]float64{"returned_broker": 5, "failed_delete": 1, "partial_backfill": 0, "failed_load": 0} {
		if got := gaugeValue(t, g.WithLabelValues(cause)); got != want {
			t.Errorf("%s: %v, want %v", cause, got, want)
		}
	}
	setLeftoverGauge(&heal.Report{}, g)
	if got := gaugeValue(t, g.WithLabelValues("returned_broker")); got != 0 {
		t.Errorf("returned_broker after a clean pass: %v", got)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
