package harness

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

// TestRepeatFaultLeavesEveryCopyTheSame: a fault repeated on a second
// copy (RepeatFault) leaves it byte-identical to the first.
func TestRepeatFaultLeavesEveryCopyTheSame(t *testing.T) {
	for _, kind := range []Kind{KindBitflip, KindTruncate} {
		a, _ := writeTemp(t, 4096)
		b, _ := writeTemp(t, 4096)
		rng := rand.New(rand.NewPCG(7, 7))
		first, err := DamageCopy(kind, a, 4000, rng)
		if err != nil {
			t.Fatal(err)
		}
		again, err := RepeatFault(first, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readFile(t, a), readFile(t, b)) || again.Offset != first.Offset || again.SizeAfter != first.SizeAfter {
			t.Errorf("%s: repeated %+v as %+v, files differ", kind, first, again)
		}
	}
	if _, err := DamageCopy(KindLatch, "x", 0, nil); err == nil {
		t.Error("DamageCopy took latch for a file fault")
	}
}

func TestKindsAndSets(t *testing.T) {
	for _, k := range AllKinds() {
		if k.CutOff() && !k.Down() {
			t.Errorf("%s cuts its brokers off but is not down", k)
		}
	}
	if !SameSet([]meta.BrokerID{1, 2, 3}, []meta.BrokerID{3, 1, 2}) || SameSet([]meta.BrokerID{1, 2}, []meta.BrokerID{1, 3}) {
		t.Error("SameSet")
	}
}

// TestInjectNeedsItsFacility: a disk fault without a loop disk, a network
// fault on loopback and a fault with no broker fail, naming why, and
// leave nothing to undo.
func TestInjectNeedsItsFacility(t *testing.T) {
	c := &Cluster{}
	b := &Broker{ID: 1}
	for _, tg := range []Target{{Kind: KindDiskFull}, {Kind: KindReadOnly}, {Kind: KindIsolate, Brokers: []*Broker{b}}, {Kind: KindKill}} {
		in, err := c.Inject(context.Background(), tg)
		if err == nil || in.Undoable() {
			t.Errorf("%s: err %v, undoable %v", tg.Kind, err, in.Undoable())
		}
	}
}
