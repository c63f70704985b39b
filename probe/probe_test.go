package probe

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/uring"
	"github.com/rs/zerolog"
)

// engines runs fn once per engine, each behind a Prober configured for it.
// The io_uring engine gets a ring of 8 so that every batch is larger than
// the ring.
func engines(t *testing.T, fn func(t *testing.T, p *Prober)) {
	for _, k := range []Kind{KindURing, KindSyscall} {
		t.Run("engine="+k.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Engine = k
			cfg.RingEntries = 8
			p, err := New(cfg)
			if errors.Is(err, uring.ErrUnavailable) {
				t.Skipf("io_uring refused on this machine: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			if got := p.Choice().Kind; got != k {
				t.Fatalf("Choice().Kind = %v, want %v", got, k)
			}
			fn(t, p)
		})
	}
}

func makeFiles(t *testing.T, dir string, n int) []string {
	t.Helper()
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, "f"+strconv.Itoa(i))
		if err := os.WriteFile(paths[i], make([]byte, (i*37)%5000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

func checkStat(t *testing.T, path string, r Result) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if r.Err != nil || r.Size != fi.Size() || r.Ino != uint64(st.Ino) || r.Dev != uint64(st.Dev) {
		t.Fatalf("%s: got size %d dev %d ino %d err %v; os.Stat says size %d dev %d ino %d",
			path, r.Size, r.Dev, r.Ino, r.Err, fi.Size(), st.Dev, st.Ino)
	}
}

func TestProbeMatchesOSStat(t *testing.T) {
	dir := t.TempDir()
	paths := makeFiles(t, dir, 100)
	engines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, len(paths)+5) // longer than needed: the tail is untouched
		out[len(paths)].Size = -7
		if err := p.Probe(context.Background(), paths, out); err != nil {
			t.Fatal(err)
		}
		for i, path := range paths {
			checkStat(t, path, out[i])
		}
		if out[len(paths)].Size != -7 {
			t.Fatal("Probe wrote past len(paths)")
		}
	})
}

func TestProbeMissingAndFailed(t *testing.T) {
	dir := t.TempDir()
	paths := makeFiles(t, dir, 3)
	paths = append(paths,
		filepath.Join(dir, "gone"),   // missing: a lost copy
		filepath.Join(paths[0], "x"), // ENOTDIR: missing too
		"bad\x00path",                // failed: bad input
		"",                           // failed: bad input
		filepath.Join(dir, strings.Repeat("n", 300)), // ENAMETOOLONG: failed
	)
	engines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, len(paths))
		if err := p.Probe(context.Background(), paths, out); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			checkStat(t, paths[i], out[i])
		}
		for _, i := range []int{3, 4} {
			if !errors.Is(out[i].Err, ErrNotExist) || !errors.Is(out[i].Err, fs.ErrNotExist) || errors.Is(out[i].Err, ErrFailed) {
				t.Fatalf("%q: err %v, want ErrNotExist and fs.ErrNotExist", paths[i], out[i].Err)
			}
		}
		for _, i := range []int{5, 6, 7} {
			if !errors.Is(out[i].Err, ErrFailed) || errors.Is(out[i].Err, ErrNotExist) {
				t.Fatalf("%q: err %v, want ErrFailed only", paths[i], out[i].Err)
			}
		}
		var pe *PathError
		if !errors.As(out[7].Err, &pe) || pe.Path != paths[7] || !errors.Is(pe, syscall.ENAMETOOLONG) {
			t.Fatalf("err %v, want a *PathError naming the path, wrapping ENAMETOOLONG", out[7].Err)
		}
	})
}

func TestProbeSwappedFile(t *testing.T) {
	engines(t, func(t *testing.T, p *Prober) {
		dir := t.TempDir()
		paths := makeFiles(t, dir, 2)
		out := make([]Result, 2)
		if err := p.Probe(context.Background(), paths, out); err != nil {
			t.Fatal(err)
		}
		before := out[0]
		// Swap the copy for another file of the same size: only the inode
		// tells them apart.
		tmp := filepath.Join(dir, "new")
		if err := os.WriteFile(tmp, make([]byte, before.Size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, paths[0]); err != nil {
			t.Fatal(err)
		}
		if err := p.Probe(context.Background(), paths, out); err != nil {
			t.Fatal(err)
		}
		checkStat(t, paths[0], out[0])
		if out[0].Ino == before.Ino || out[0].Size != before.Size {
			t.Fatalf("after the swap: ino %d size %d, before ino %d size %d; want a new inode, same size",
				out[0].Ino, out[0].Size, before.Ino, before.Size)
		}
	})
}

func TestProbeLargerThanRing(t *testing.T) {
	dir := t.TempDir()
	files := makeFiles(t, dir, 50)
	paths := make([]string, 5000) // 625 rings of 8
	for i := range paths {
		paths[i] = files[i%len(files)]
	}
	engines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, len(paths))
		if err := p.Probe(context.Background(), paths, out); err != nil {
			t.Fatal(err)
		}
		for i := range paths {
			if out[i].Err != nil || out[i].Size != int64(((i%50)*37)%5000) {
				t.Fatalf("%d: %+v", i, out[i])
			}
		}
	})
}

// A deadline that passes mid-batch: every entry is either answered
// correctly (found or missing) or marked ErrDeadline, and both kinds occur.
// The deadline doubles until the batch is cut somewhere inside.
func TestProbeDeadlineMidBatch(t *testing.T) {
	dir := t.TempDir()
	files := makeFiles(t, dir, 50)
	files = append(files, filepath.Join(dir, "gone"))
	paths := make([]string, 200000)
	for i := range paths {
		paths[i] = files[i%len(files)]
	}
	engines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, len(paths))
		for d := time.Millisecond; ; d *= 2 {
			if d > 10*time.Second {
				t.Fatal("no deadline cut the batch in the middle")
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			start := time.Now()
			err := p.Probe(ctx, paths, out)
			el := time.Since(start)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			var answered, missing, late int
			for i, r := range out {
				switch {
				case r.Err == nil:
					if r.Size != int64(((i%51)*37)%5000) {
						t.Fatalf("%d: size %d", i, r.Size)
					}
					answered++
				case errors.Is(r.Err, ErrNotExist):
					if i%51 != 50 {
						t.Fatalf("%d: %v", i, r.Err)
					}
					missing++
				case errors.Is(r.Err, ErrDeadline):
					if !errors.Is(r.Err, context.DeadlineExceeded) {
						t.Fatalf("%d: %v does not unwrap to DeadlineExceeded", i, r.Err)
					}
					late++
				default:
					t.Fatalf("%d: unexpected %v", i, r.Err)
				}
			}
			// A sanity bound only (the machine may be loaded): the proof
			// that the deadline cut the batch is the late entries below.
			if el > d+5*time.Second {
				t.Fatalf("Probe took %v with a %v deadline", el, d)
			}
			t.Logf("deadline %v: %d answered, %d missing, %d late, took %v", d, answered, missing, late, el)
			if answered > 0 && missing > 0 && late > 0 {
				return
			}
		}
	})
}

func TestProbeCloseWhileBatchWaits(t *testing.T) {
	dir := t.TempDir()
	files := makeFiles(t, dir, 50)
	paths := make([]string, 1000000) // seconds of work
	for i := range paths {
		paths[i] = files[i%len(files)]
	}
	engines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, len(paths))
		done := make(chan error, 1)
		go func() { done <- p.Probe(context.Background(), paths, out) }()
		time.Sleep(100 * time.Millisecond)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Probe still running 5s after Close")
		}
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Probe = %v, want ErrClosed", err)
		}
		var answered, closed int
		for i, r := range out {
			switch {
			case r.Err == nil && r.Size == int64(((i%50)*37)%5000):
				answered++
			case errors.Is(r.Err, ErrClosed):
				closed++
			default:
				t.Fatalf("%d: %+v", i, r)
			}
		}
		if answered == 0 || closed == 0 {
			t.Fatalf("answered %d, closed %d: want both", answered, closed)
		}
		if err := p.Probe(context.Background(), paths[:1], out); !errors.Is(err, ErrClosed) {
			t.Fatalf("Probe after Close = %v, want ErrClosed", err)
		}
	})
}

func TestProbeBadInput(t *testing.T) {
	engines(t, func(t *testing.T, p *Prober) {
		out := []Result{{Size: 9}}
		if err := p.Probe(context.Background(), []string{"a", "b"}, out); err == nil {
			t.Fatal("Probe with a short result slice succeeded")
		}
		if out[0].Size != 9 {
			t.Fatal("a refused Probe changed the result slice")
		}
	})
	bad := DefaultConfig()
	bad.RingEntries = 0
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "RingEntries") {
		t.Fatalf("New with RingEntries 0: %v, want an error naming the field", err)
	}
	if _, err := ParseKind("fast"); err == nil {
		t.Fatal("ParseKind(fast) succeeded")
	}
	for _, k := range []Kind{KindAuto, KindURing, KindSyscall} {
		if got, err := ParseKind(k.String()); err != nil || got != k {
			t.Fatalf("ParseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
}

func TestAutoChoosesURingAndSaysWhy(t *testing.T) {
	var buf bytes.Buffer
	cfg := DefaultConfig()
	cfg.Logger = zerolog.New(&buf)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := p.Choice()
	if _, uerr := NewURing(8, 0); uerr != nil {
		if c.Kind != KindSyscall || !strings.Contains(c.Reason, "refused") {
			t.Fatalf("io_uring refused (%v) but Choice = %v", uerr, c)
		}
	} else if c.Kind != KindURing {
		t.Fatalf("io_uring works but Choice = %v", c)
	}
	if !strings.Contains(buf.String(), `"engine":"`+c.Kind.String()+`"`) || !strings.Contains(buf.String(), "probe: engine chosen") {
		t.Fatalf("log %q does not name the chosen engine", buf.String())
	}
}

// fakeEngine answers every target with its name's length as size and advances a fake
// clock by cost per path.
type fakeEngine struct {
	kind  Kind
	cost  *time.Duration
	clock *time.Time
	paths int
}

func (f *fakeEngine) Kind() Kind   { return f.kind }
func (f *fakeEngine) Close() error { return nil }
func (f *fakeEngine) ProbeRange(_ context.Context, b *Batch, from int, out []Result) error {
	for j := range out {
		_, name := b.Entry(from + j)
		out[j] = Result{Size: int64(len(name))}
	}
	*f.clock = f.clock.Add(time.Duration(len(out)) * *f.cost)
	f.paths += len(out)
	return nil
}

// Auto measures both engines on samples and moves to the faster one, and
// back when that changes; tiny batches go to the syscall engine.
func TestAutoFollowsMeasurement(t *testing.T) {
	now := time.Unix(0, 0)
	uCost, sCost := 2*time.Microsecond, 5*time.Microsecond
	u := &fakeEngine{kind: KindURing, cost: &uCost, clock: &now}
	s := &fakeEngine{kind: KindSyscall, cost: &sCost, clock: &now}
	var buf bytes.Buffer
	cfg := DefaultConfig()
	cfg.Logger = zerolog.New(&buf)
	cfg.Now = func() time.Time { return now }
	cfg.ExploreEvery, cfg.ExploreSample = 4, 100
	p, err := newProber(cfg, s, func(uint32, uint32) (Engine, error) { return u, nil })
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 1000)
	for i := range paths {
		paths[i] = strings.Repeat("p", i%7+1)
	}
	out := make([]Result, len(paths))
	probe := func() {
		t.Helper()
		if err := p.Probe(context.Background(), paths, out); err != nil {
			t.Fatal(err)
		}
		for i := range paths {
			if out[i].Size != int64(len(paths[i])) {
				t.Fatalf("%d not answered", i)
			}
		}
	}
	probe() // the ring's first run only warms it up: nothing compared yet
	probe()
	if c := p.Choice(); c.Kind != KindURing || s.paths != 200 || u.paths != 1800 {
		t.Fatalf("first two batches: choice %v, syscall answered %d, uring %d; want uring, 200, 1800", c, s.paths, u.paths)
	}
	probe() // compared: no sample until the ExploreEvery-th batch
	if s.paths != 200 || u.paths != 2800 {
		t.Fatalf("third batch: syscall answered %d, uring %d; want 200, 2800", s.paths, u.paths)
	}
	uCost = 10 * time.Microsecond // io_uring got slower than syscalls
	for range 5 {
		probe()
	}
	if c := p.Choice(); c.Kind != KindSyscall || !strings.Contains(c.Reason, "ns/path") {
		t.Fatalf("after io_uring slowed down: choice %v, want syscall with the measurement", c)
	}
	if !strings.Contains(buf.String(), "probe: engine changed") {
		t.Fatalf("no log event for the change: %q", buf.String())
	}
	uCost = time.Microsecond
	for range 12 {
		probe()
	}
	if c := p.Choice(); c.Kind != KindURing {
		t.Fatalf("after io_uring sped up: choice %v, want uring", c)
	}
	before := u.paths
	if err := p.Probe(context.Background(), paths[:3], out); err != nil {
		t.Fatal(err)
	}
	if u.paths != before {
		t.Fatal("a 3-path batch went to io_uring; want syscall below SmallBatch")
	}
	ui, si := p.Measured()
	if ui <= 0 || si <= 0 {
		t.Fatalf("Measured = %v, %v", ui, si)
	}
}

// Auto follows the measured speed for ProbeBatch as for Probe, and
// Choice reports the engine answering batches now.
func TestAutoFollowsMeasurementInBatches(t *testing.T) {
	now := time.Unix(0, 0)
	uCost, sCost := 2*time.Microsecond, 5*time.Microsecond
	u := &fakeEngine{kind: KindURing, cost: &uCost, clock: &now}
	s := &fakeEngine{kind: KindSyscall, cost: &sCost, clock: &now}
	cfg := DefaultConfig()
	cfg.Now = func() time.Time { return now }
	cfg.ExploreEvery, cfg.ExploreSample = 4, 100
	p, err := newProber(cfg, s, func(uint32, uint32) (Engine, error) { return u, nil })
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	for i := range 1000 {
		b.Add(i%256, strings.Repeat("n", i%7+1), ".seg")
	}
	out := make([]Result, b.Len())
	probe := func(n int) {
		t.Helper()
		for range n {
			if err := p.ProbeBatch(context.Background(), &b, out); err != nil {
				t.Fatal(err)
			}
		}
		for i := range out {
			if out[i].Size != int64(i%7+1+len(".seg")) {
				t.Fatalf("%d: size %d, not answered", i, out[i].Size)
			}
		}
	}
	probe(3)
	if c := p.Choice(); c.Kind != KindURing {
		t.Fatalf("io_uring faster: Choice = %v", c)
	}
	uCost = 10 * time.Microsecond
	probe(8)
	if c := p.Choice(); c.Kind != KindSyscall || !strings.Contains(c.Reason, "ns/path") {
		t.Fatalf("io_uring slower: Choice = %v, want syscall with the measurement", c)
	}
	uCost = time.Microsecond
	probe(8)
	if c := p.Choice(); c.Kind != KindURing {
		t.Fatalf("io_uring faster again: Choice = %v", c)
	}
}
