package broker

import (
	"context"
	"testing"
	"time"

	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
)

// TestFetchOffsetsNeverAnswersBelowAnAcknowledgedCommit: a broker whose
// raft log trails a committed offset (it was down when the commit was
// acknowledged) is asked for the group's offsets as soon as it is back.
// Its own log cannot answer: with no leader reachable the answer is an
// error, never the older offset; once the leader is back, it is the
// commit. The nemesis (seed 777) had a group resume 10,950 offsets below
// its acknowledged commit: the coordinator read up to what it knew
// committed, which trailed.
func TestFetchOffsetsNeverAnswersBelowAnAcknowledgedCommit(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	ctx := context.Background()
	leader := c.leader()
	var behind, other meta.BrokerID
	for _, b := range c.brokers {
		switch {
		case b.self == leader.self:
		case behind == 0:
			behind = b.self
		default:
			other = b.self
		}
	}
	commit := func(off int64) {
		t.Helper()
		if err := newKafkaCluster(c.leader()).CommitOffsets(ctx, "g", []kafka.Offset{{Topic: "t", Partition: 0, Offset: off}}); err != nil {
			t.Fatalf("commit offset %d: %v", off, err)
		}
	}
	commit(7)
	c.stop(behind)
	commit(42) // acknowledged by the leader and the other follower
	c.stop(leader.self)
	c.stop(other)
	back := c.start(behind)

	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	offs, err := newKafkaCluster(back).FetchOffsets(fctx, "g")
	if err == nil {
		t.Fatalf("broker %d, back with no leader reachable, answered the group's offsets %+v; want an error (it cannot know the commit of 42)", behind, offs)
	}

	c.start(leader.self)
	c.start(other)
	fctx, cancel = context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	offs, err = newKafkaCluster(back).FetchOffsets(fctx, "g")
	if err != nil || len(offs) != 1 || offs[0].Offset != 42 {
		t.Fatalf("broker %d with its peers back: offsets %+v, %v; want the acknowledged commit, 42", behind, offs, err)
	}
}
