package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/internal/hclogzero"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"

	"github.com/malachi-log/malachi/internal/pebblelog"
)

func openTestStore(t testing.TB, dir string) *logStore {
	t.Helper()
	s, err := openLogStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStableStoreMissingKeyIsNotFound(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	if _, err := s.Get([]byte("nope")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of a missing key: %v, want the text %q (raft compares it)", err, "not found")
	}
	if _, err := s.GetUint64([]byte("nope")); err == nil || err.Error() != "not found" || !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("GetUint64 of a missing key: %v", err)
	}
	// raft.InmemStore, the reference, says the same.
	ref := raft.NewInmemStore()
	if _, err := ref.Get([]byte("nope")); err == nil || err.Error() != "not found" {
		t.Fatalf("reference changed: %v", err)
	}
	if err := s.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("term"), 42); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get: %q %v", v, err)
	}
	if v, err := s.GetUint64([]byte("term")); err != nil || v != 42 {
		t.Fatalf("GetUint64: %d %v", v, err)
	}
	// A stable key never shows up as a log entry and vice versa.
	if first, err := s.FirstIndex(); err != nil || first != 0 {
		t.Fatalf("FirstIndex with only stable keys: %d %v", first, err)
	}
	if _, err := s.GetUint64([]byte("k")); err == nil {
		t.Fatal("GetUint64 of a 1-byte value succeeded")
	}
}

func TestLogStorePersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	at := time.Unix(1700000000, 123456789)
	var logs []*raft.Log
	for i := uint64(5); i <= 9; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: i / 2, Type: raft.LogCommand, Data: []byte(fmt.Sprint("d", i)), Extensions: []byte("x"), AppendedAt: at})
	}
	logs[0].Type, logs[0].Data, logs[0].Extensions, logs[0].AppendedAt = raft.LogNoop, nil, nil, time.Time{}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir)
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 5 || last != 9 {
		t.Fatalf("after reopen first %d last %d, want 5 9", first, last)
	}
	for _, want := range logs {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		if !sameLog(&got, want) {
			t.Fatalf("entry %d: %+v, want %+v", want.Index, got, *want)
		}
	}
	var l raft.Log
	if err := s.GetLog(10, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("missing entry: %v, want raft.ErrLogNotFound", err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 4 {
		t.Fatalf("stable after reopen: %d %v", v, err)
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	b := encodeLog(nil, &raft.Log{Index: 1, Term: 1, Data: []byte("abc")})
	var l raft.Log
	for i := range len(b) {
		if err := decodeLog(b[:i], &l); err == nil {
			t.Fatalf("decoded a %d-byte prefix of a %d-byte entry", i, len(b))
		}
	}
	if err := decodeLog(append(b, 0), &l); err == nil {
		t.Fatal("decoded an entry with a trailing byte")
	}
	b[0] = 9
	if err := decodeLog(b, &l); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("unknown version: %v", err)
	}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

// TestLogStoreMatchesInmemStore drives the Pebble store and raft's own
// InmemStore (the reference) with the operations raft performs: appends
// of contiguous batches, prefix compaction, and suffix truncation on a
// conflict, and compares every observable.
func TestLogStoreMatchesInmemStore(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		s, err := openLogStore(fmt.Sprintf("%s/%d", dir, run), zerolog.Nop())
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		ref := raft.NewInmemStore()
		next := rapid.Uint64Range(1, 1000).Draw(rt, "start")
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range steps {
			first, _ := ref.FirstIndex()
			last, _ := ref.LastIndex()
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); {
			case op <= 1 || last == 0: // append
				k := rapid.IntRange(1, 8).Draw(rt, "k")
				var batch []*raft.Log
				for range k {
					batch = append(batch, &raft.Log{Index: next, Term: next/7 + 1, Type: raft.LogType(rapid.IntRange(0, 5).Draw(rt, "type")),
						Data: []byte(rapid.String().Draw(rt, "data")), AppendedAt: time.Unix(0, int64(next)*1000)})
					next++
				}
				if err := s.StoreLogs(batch); err != nil {
					rt.Fatal(err)
				}
				if err := ref.StoreLogs(batch); err != nil {
					rt.Fatal(err)
				}
			case op == 2: // compact a prefix
				hi := rapid.Uint64Range(first, last).Draw(rt, "hi")
				must(rt, s.DeleteRange(first, hi))
				must(rt, ref.DeleteRange(first, hi))
			case op == 3: // truncate a suffix, as on a conflicting leader
				lo := rapid.Uint64Range(first, last).Draw(rt, "lo")
				must(rt, s.DeleteRange(lo, last))
				must(rt, ref.DeleteRange(lo, last))
				next = lo
			}
			f1, _ := s.FirstIndex()
			f2, _ := ref.FirstIndex()
			l1, _ := s.LastIndex()
			l2, _ := ref.LastIndex()
			if f1 != f2 || l1 != l2 {
				rt.Fatalf("first/last %d/%d, reference %d/%d", f1, l1, f2, l2)
			}
			if l2 == 0 {
				next = max(next, 1)
			}
			for i := f2 - min(f2, 2); i <= l2+2; i++ {
				var a, b raft.Log
				e1 := s.GetLog(i, &a)
				e2 := ref.GetLog(i, &b)
				if (e1 == nil) != (e2 == nil) || (e1 != nil && !errors.Is(e1, raft.ErrLogNotFound)) {
					rt.Fatalf("GetLog(%d): %v, reference %v", i, e1, e2)
				}
				if e1 == nil && !sameLog(&a, &b) {
					rt.Fatalf("GetLog(%d): %+v, reference %+v", i, a, b)
				}
			}
		}
	})
}

func must(t *rapid.T, err error) {
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeleteRangeToMaxUint64(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	if err := s.StoreLogs([]*raft.Log{{Index: 1}, {Index: 2}, {Index: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("a"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(2, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != 1 {
		t.Fatalf("last %d, want 1", last)
	}
	if v, err := s.GetUint64([]byte("a")); err != nil || v != 1 {
		t.Fatalf("a range delete of the log touched the stable store: %d %v", v, err)
	}
}

func TestLoggersGoToZerolog(t *testing.T) {
	var buf bytes.Buffer
	zl := zerolog.New(&buf)
	h := hclogzero.New(zl, "raft").Named("net").With("peer", "2")
	h.Info("hello", "term", 3, "err", errors.New("boom"))
	h.Debug("quiet")
	h.SetLevel(1 << 3) // above Error: off
	h.Error("silenced")
	out := buf.String()
	for _, want := range []string{`"component":"raft.net"`, `"peer":"2"`, `"term":3`, `"err":"boom"`, `"message":"hello"`, `"quiet"`} {
		if !strings.Contains(out, want) {
			t.Errorf("hclog adapter output %s lacks %s", out, want)
		}
	}
	if strings.Contains(out, "silenced") {
		t.Errorf("SetLevel did not silence: %s", out)
	}
	buf.Reset()
	pebblelog.New(zl, "raft-log").Infof("compaction %d", 7)
	if !strings.Contains(buf.String(), `"message":"compaction 7"`) || !strings.Contains(buf.String(), `"component":"pebble"`) {
		t.Errorf("pebble adapter output %s", buf.String())
	}
	defer func() {
		if recover() == nil {
			t.Error("pebble Fatalf returned")
		}
	}()
	pebblelog.New(zl, "raft-log").Fatalf("broken")
}
