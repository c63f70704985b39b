package fsync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/uring"
)

// store.DirSyncer, as the store package declares it.
var _ interface {
	SyncDir(ctx context.Context, path string) error
} = (*Syncer)(nil)

// gated holds each batch at the engine's door until the test lets it in.
type gated struct {
	Engine
	entered chan int
	release chan struct{}
}

func (g *gated) Sync(fds []int, dataOnly []bool, errs []error) {
	g.entered <- len(fds)
	<-g.release
	g.Engine.Sync(fds, dataOnly, errs)
}

func engine(t *testing.T, k Kind, entries uint32) Engine {
	t.Helper()
	if k == KindSyscall {
		return NewSyscall()
	}
	e, err := NewURing(entries, 16)
	if errors.Is(err, uring.ErrUnavailable) {
		t.Skipf("io_uring refused on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// engines runs fn for each engine; with gate, batches wait at the engine.
func engines(t *testing.T, gate bool, fn func(t *testing.T, s *Syncer, g *gated)) {
	for _, k := range []Kind{KindURing, KindSyscall} {
		t.Run("engine="+k.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RingEntries = 8
			cfg.FilesystemSyncMin = 0 // the engines' own fsyncs are under test
			e := engine(t, k, cfg.RingEntries)
			var g *gated
			if gate {
				g = &gated{Engine: e, entered: make(chan int, 100), release: make(chan struct{})}
				e = g
			}
			s := newSyncer(cfg, e, "test")
			t.Cleanup(func() { s.Close() })
			if s.Choice().Kind != k {
				t.Fatalf("Choice = %v, want %v", s.Choice(), k)
			}
			fn(t, s, g)
		})
	}
}

func dirs(t *testing.T, n int) []string {
	t.Helper()
	root := t.TempDir()
	out := make([]string, n)
	for i := range out {
		out[i] = filepath.Join(root, "d"+strconv.Itoa(i))
		if err := os.Mkdir(out[i], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out[i], "new.log"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestSyncBatch(t *testing.T) {
	engines(t, false, func(t *testing.T, s *Syncer, _ *gated) {
		d := dirs(t, 3)
		file := filepath.Join(d[0], "new.log")
		reqs := []Request{
			{Path: d[0], Dir: true},
			{Path: d[1], Dir: true},
			{Path: d[0], Dir: true}, // duplicate: synced once
			{Path: file, DataOnly: true},
			{Path: file}, // full sync of the same file covers the data-only one
			{Path: filepath.Join(d[2], "gone"), Dir: true},
			{Path: file, Dir: true}, // not a directory
			{Path: d[2], Dir: true},
		}
		errs := make([]error, len(reqs))
		if err := s.Sync(context.Background(), reqs, errs); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 1, 2, 3, 4, 7} {
			if errs[i] != nil {
				t.Fatalf("request %d (%+v): %v", i, reqs[i], errs[i])
			}
		}
		if !errors.Is(errs[5], syscall.ENOENT) || !strings.Contains(errs[5].Error(), "gone") {
			t.Fatalf("missing dir: %v, want ENOENT naming the path", errs[5])
		}
		if !errors.Is(errs[6], syscall.ENOTDIR) {
			t.Fatalf("SyncDir of a file: %v, want ENOTDIR", errs[6])
		}
		st := s.Stats()
		if st.Batches != 1 || st.Requests != 8 || st.Syncs != 4 {
			t.Fatalf("stats %+v, want 1 batch, 8 requests, 4 fsyncs (d0, d1, d2, file)", st)
		}
		if err := s.SyncDir(context.Background(), d[1]); err != nil {
			t.Fatal(err)
		}
		if err := s.SyncFile(context.Background(), file, true); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBatchLargerThanRing(t *testing.T) {
	engines(t, false, func(t *testing.T, s *Syncer, _ *gated) {
		d := dirs(t, 100) // ring of 8
		reqs := make([]Request, len(d))
		for i := range d {
			reqs[i] = Request{Path: d[i], Dir: true}
		}
		errs := make([]error, len(reqs))
		if err := s.Sync(context.Background(), reqs, errs); err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("%s: %v", d[i], e)
			}
		}
		if st := s.Stats(); st.Syncs != 100 {
			t.Fatalf("stats %+v, want 100 fsyncs", st)
		}
	})
}

// While one batch is in the engine, 60 callers on 4 directories queue up;
// they are answered by one next batch with 4 fsyncs.
func TestGroupCommit(t *testing.T) {
	engines(t, true, func(t *testing.T, s *Syncer, g *gated) {
		d := dirs(t, 4)
		first := make(chan error, 1)
		go func() { first <- s.SyncDir(context.Background(), d[0]) }()
		if n := <-g.entered; n != 1 {
			t.Fatalf("first batch has %d fsyncs, want 1", n)
		}
		var wg sync.WaitGroup
		errs := make([]error, 60)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.SyncDir(context.Background(), d[i%4]) }()
		}
		for s.queued() < 60 {
			time.Sleep(time.Millisecond)
		}
		close(g.release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if n := <-g.entered; n != 4 {
			t.Fatalf("second batch has %d fsyncs, want 4", n)
		}
		wg.Wait()
		for i, e := range errs {
			if e != nil {
				t.Fatalf("caller %d: %v", i, e)
			}
		}
		if st := s.Stats(); st.Batches != 2 || st.Requests != 61 || st.Syncs != 5 {
			t.Fatalf("stats %+v, want 2 batches, 61 requests, 5 fsyncs", st)
		}
	})
}

func (s *Syncer) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

func TestCallerDeadline(t *testing.T) {
	engines(t, true, func(t *testing.T, s *Syncer, g *gated) {
		d := dirs(t, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		err := s.SyncDir(ctx, d[0])
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SyncDir past its deadline = %v, want DeadlineExceeded", err)
		}
		<-g.entered
		close(g.release) // the batch still runs; the next caller is served
		if err := s.SyncDir(context.Background(), d[0]); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCloseWhileBatchWaits(t *testing.T) {
	engines(t, true, func(t *testing.T, s *Syncer, g *gated) {
		d := dirs(t, 2)
		inBatch := make(chan error, 1)
		go func() { inBatch <- s.SyncDir(context.Background(), d[0]) }()
		<-g.entered
		queued := make(chan error, 1)
		go func() { queued <- s.SyncDir(context.Background(), d[1]) }()
		for s.queued() < 1 {
			time.Sleep(time.Millisecond)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		for !s.isClosed() {
			time.Sleep(time.Millisecond)
		}
		close(g.release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if err := <-inBatch; !errors.Is(err, ErrClosed) {
			t.Fatalf("caller in the interrupted batch: %v, want ErrClosed", err)
		}
		if err := <-queued; !errors.Is(err, ErrClosed) {
			t.Fatalf("queued caller: %v, want ErrClosed", err)
		}
		if err := s.SyncDir(context.Background(), d[0]); !errors.Is(err, ErrClosed) {
			t.Fatalf("SyncDir after Close: %v, want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func (s *Syncer) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func TestBadInput(t *testing.T) {
	engines(t, false, func(t *testing.T, s *Syncer, _ *gated) {
		if err := s.Sync(context.Background(), []Request{{Path: ""}}, make([]error, 1)); err == nil {
			t.Fatal("empty path accepted")
		}
		if err := s.Sync(context.Background(), []Request{{Path: "a"}, {Path: "b"}}, make([]error, 1)); err == nil {
			t.Fatal("short error slice accepted")
		}
		if st := s.Stats(); st.Requests != 0 {
			t.Fatalf("refused input was queued: %+v", st)
		}
	})
	cfg := DefaultConfig()
	cfg.MaxBatch = 0
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "MaxBatch") {
		t.Fatalf("New with MaxBatch 0: %v", err)
	}
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, uerr := NewURing(8, 0); uerr == nil && s.Choice().Kind != KindURing {
		t.Fatalf("io_uring works but Auto chose %v", s.Choice())
	}
}

// MaxBatch bounds the distinct paths per batch: 10 distinct paths with
// MaxBatch 3 take 4 batches.
func TestMaxBatch(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBatch = 3
	cfg.FilesystemSyncMin = 0
	s := newSyncer(cfg, NewSyscall(), "test")
	defer s.Close()
	d := dirs(t, 10)
	reqs := make([]Request, 0, 20)
	for i := range 20 {
		reqs = append(reqs, Request{Path: d[i%10], Dir: true})
	}
	errs := make([]error, len(reqs))
	if err := s.Sync(context.Background(), reqs, errs); err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		if e != nil {
			t.Fatal(e)
		}
	}
	st := s.Stats()
	if st.Syncs > 20 || st.Batches < 4 || st.Requests != 20 {
		t.Fatalf("stats %+v: want at least 4 batches for 10 paths at 3 per batch", st)
	}
}
