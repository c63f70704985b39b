//go:build linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/uring"
	"golang.org/x/sys/unix"
)

// shards makes nDirs directories under a temporary directory with files
// t-0001-NNNNNN.seg spread over them (file i in directory i%nDirs, of
// size i%300), opens each directory, and returns the batch that names
// every file relative to its directory, and the full paths.
func shards(t *testing.T, nDirs, nFiles int) (*Batch, []string) {
	t.Helper()
	root := t.TempDir()
	fds := make([]int, nDirs)
	for d := range fds {
		dir := filepath.Join(root, fmt.Sprintf("%02x", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		fds[d] = fd
	}
	b := &Batch{}
	paths := make([]string, nFiles)
	for i := range paths {
		name := fmt.Sprintf("t-0001-%06d", i)
		paths[i] = filepath.Join(root, fmt.Sprintf("%02x", i%nDirs), name+".seg")
		if err := os.WriteFile(paths[i], make([]byte, i%300), 0o644); err != nil {
			t.Fatal(err)
		}
		b.Add(fds[i%nDirs], name, ".seg")
	}
	return b, paths
}

// allEngines runs fn behind a Prober for each engine, Auto included (with
// a sample small enough that a batch of 100 explores).
func allEngines(t *testing.T, fn func(t *testing.T, p *Prober)) {
	for _, k := range []Kind{KindURing, KindSyscall, KindAuto} {
		t.Run("engine="+k.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Engine = k
			cfg.RingEntries = 8
			cfg.ExploreSample, cfg.ExploreEvery = 16, 2
			p, err := New(cfg)
			if errors.Is(err, uring.ErrUnavailable) {
				t.Skipf("io_uring refused on this machine: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			fn(t, p)
		})
	}
}

func TestProbeBatchMatchesOSLstat(t *testing.T) {
	b, paths := shards(t, 16, 200)
	allEngines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, b.Len()+1)
		out[b.Len()].Size = -7
		for range 3 { // Auto explores and may change engines between rounds
			if err := p.ProbeBatch(context.Background(), b, out); err != nil {
				t.Fatal(err)
			}
			for i, path := range paths {
				checkStat(t, path, out[i])
			}
			if out[b.Len()].Size != -7 {
				t.Fatal("ProbeBatch wrote past b.Len()")
			}
		}
	})
}

// Missing files, bad names and a symbolic link, each named in its error;
// the link is not followed.
func TestProbeBatchErrorsNameTheFile(t *testing.T) {
	b, paths := shards(t, 2, 4)
	dirfd, _ := b.Entry(0)
	dir := filepath.Dir(paths[0])
	if err := os.Symlink(filepath.Base(paths[2]), filepath.Join(dir, "link.seg")); err != nil {
		t.Fatal(err)
	}
	b.Add(dirfd, "t-0001-999999", ".seg")   // 4: missing
	b.Add(dirfd, "t-0001-000000.seg", "/x") // 5: ENOTDIR, missing too
	b.Add(dirfd, "bad\x00name", ".seg")     // 6: EINVAL
	b.Add(dirfd, "", "")                    // 7: EINVAL
	b.Add(dirfd, strings.Repeat("n", 300), "")
	b.Add(dirfd, "link", ".seg") // 9: the link itself
	b.Add(-1, "t-0001-000000", ".seg")
	allEngines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, b.Len())
		if err := p.ProbeBatch(context.Background(), b, out); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			checkStat(t, paths[i], out[i])
		}
		wantErr := map[int]struct {
			kind  error
			errno syscall.Errno
			name  string
		}{
			4:  {ErrNotExist, unix.ENOENT, "t-0001-999999.seg"},
			5:  {ErrNotExist, unix.ENOTDIR, "t-0001-000000.seg/x"},
			6:  {ErrFailed, unix.EINVAL, "bad\x00name.seg"},
			7:  {ErrFailed, unix.EINVAL, ""},
			8:  {ErrFailed, unix.ENAMETOOLONG, strings.Repeat("n", 300)},
			10: {ErrFailed, unix.EBADF, "t-0001-000000.seg"},
		}
		for i, w := range wantErr {
			var pe *PathError
			if !errors.As(out[i].Err, &pe) || pe.Kind != w.kind || pe.Path != w.name || !errors.Is(pe, w.errno) {
				t.Fatalf("entry %d: err %v, want %v naming %q wrapping %v", i, out[i].Err, w.kind, w.name, w.errno)
			}
			if w.kind == ErrNotExist && !errors.Is(out[i].Err, fs.ErrNotExist) {
				t.Fatalf("entry %d: %v does not match fs.ErrNotExist", i, out[i].Err)
			}
		}
		var lst unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, "link.seg"), &lst); err != nil {
			t.Fatal(err)
		}
		if r := out[9]; r.Err != nil || r.Ino != lst.Ino || r.Size != lst.Size {
			t.Fatalf("link: %+v, want the link's own inode %d and size %d (not followed)", r, lst.Ino, lst.Size)
		}
	})
}

func TestBatchAddAllocatesNothingWhenWarm(t *testing.T) {
	var b Batch
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("t-0001-%06d", i)
	}
	fill := func() {
		b.Reset()
		for i, n := range names {
			b.Add(i%256, n, ".seg")
		}
	}
	fill()
	if a := testing.AllocsPerRun(10, fill); a != 0 {
		t.Fatalf("a warm Reset and 1000 Adds allocate %v times, want 0", a)
	}
	if b.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000", b.Len())
	}
	if fd, name := b.Entry(999); fd != 999%256 || name != "t-0001-000999.seg" {
		t.Fatalf("Entry(999) = %d, %q", fd, name)
	}
	var g Batch
	g.Grow(2000, 2*17000) // AllocsPerRun runs fn once more to warm up
	if a := testing.AllocsPerRun(1, func() {
		for i, n := range names {
			g.Add(i, n, ".seg")
		}
	}); a != 0 {
		t.Fatalf("Adds after Grow allocate %v times, want 0", a)
	}
}

// A warm ProbeBatch of 10^4 files allocates a constant number of times,
// not once per entry, with every engine: Auto is measured over enough
// batches to include exploring ones (a sample on the other engine).
func TestProbeBatchAllocatesNothingPerEntry(t *testing.T) {
	b, _ := shards(t, 256, 10000)
	for _, k := range []Kind{KindURing, KindSyscall, KindAuto} {
		t.Run("engine="+k.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Engine = k
			cfg.ExploreSample, cfg.ExploreEvery = 1000, 2
			p, err := New(cfg)
			if errors.Is(err, uring.ErrUnavailable) {
				t.Skipf("io_uring refused on this machine: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			out := make([]Result, b.Len())
			ctx := context.Background()
			run := func() {
				if err := p.ProbeBatch(ctx, b, out); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				run()
			}
			allocs := testing.AllocsPerRun(10, run)
			for i, r := range out {
				if r.Err != nil || r.Size != int64(i%300) {
					t.Fatalf("entry %d: %+v", i, r)
				}
			}
			// An engine change formats its reason (a few allocations):
			// anything per entry would be thousands.
			t.Logf("%v: %.1f allocations per batch of %d", k, allocs, b.Len())
			if allocs > 8 {
				t.Fatalf("%v: a warm batch of %d allocates %.1f times, want O(1) (<= 8)", k, b.Len(), allocs)
			}
		})
	}
}

// A ring run cut by its deadline with statx still in flight leaves the
// batch's arena to the orphans: the batch gets a fresh copy, and refilling
// it cannot touch memory the kernel may still read. Both stay correct.
func TestProbeBatchDeadlineDetachesArena(t *testing.T) {
	b, paths := shards(t, 4, 50)
	big := &Batch{}
	for range 4000 {
		for i := range b.Len() {
			fd, name := b.Entry(i)
			big.Add(fd, name, "")
		}
	}
	cfg := DefaultConfig()
	cfg.Engine = KindURing
	cfg.MaxWorkers = 1 // one io-wq worker: a cut finds statx queued behind it
	p, err := New(cfg)
	if errors.Is(err, uring.ErrUnavailable) {
		t.Skipf("io_uring refused: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ring := p.uring.(*uringEngine).ring
	out := make([]Result, big.Len())
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			t.Fatal("no deadline in 100 attempts cut the batch with statx in flight")
		}
		d := 100 * time.Microsecond << (attempt % 8) // 0.1 to 12.8 ms, again and again
		before := &big.arena[0]
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := p.ProbeBatch(ctx, big, out)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		late := 0
		for i, r := range out {
			switch {
			case r.Err == nil:
				if r.Size != int64((i%50)%300) {
					t.Fatalf("entry %d: size %d", i, r.Size)
				}
			case errors.Is(r.Err, ErrDeadline):
				late++
			default:
				t.Fatalf("entry %d: %v", i, r.Err)
			}
		}
		detached := &big.arena[0] != before
		t.Logf("deadline %v: %d of %d late, arena detached: %v", d, late, len(out), detached)
		// Whenever statx of the cut run are still in flight (orphans), the
		// batch has let go of the arena they point into.
		if inflight := ring.InFlight(); inflight > 0 && !detached {
			t.Fatalf("%d statx in flight into the batch's arena, and the batch kept it", inflight)
		}
		if !detached {
			continue // not cut, or nothing was left in flight
		}
		if late == 0 {
			t.Fatal("arena detached after a run that answered everything")
		}
		// The batch now has an arena of its own: refill and probe again.
		big.Reset()
		for i := range b.Len() {
			fd, name := b.Entry(i)
			big.Add(fd, "x"+name, "") // a name the old arena does not hold
		}
		if &big.arena[0] == before {
			t.Fatal("the detached arena was reused")
		}
		if err := p.ProbeBatch(context.Background(), big, out); err != nil {
			t.Fatal(err)
		}
		for i := range b.Len() {
			if !errors.Is(out[i].Err, ErrNotExist) {
				t.Fatalf("entry %d (%s): %v, want missing", i, paths[i], out[i].Err)
			}
		}
		return
	}
}
