package healrun

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/catchup"
)

// Pattern is a heal's work: Bytes moved onto Targets brokers at once, in
// copies of CopyBytes (a segment and its footer).
type Pattern struct {
	Bytes     int64
	Targets   int
	CopyBytes int64
}

// Limit is what this machine does, in the same run as a heal, for that
// heal's Pattern, in bytes per second: Disk, Targets writers writing
// their share of the bytes at once, copy after copy, exactly as a
// catch-up target writes a copy (catchup.WriteLikeTarget: its chunk,
// pipe-sized writes and write-behind) and ending each copy with one
// fdatasync, as the Commit does; Loopback, the same bytes sent with
// sendfile(2) from a page-cached file over Targets loopback TCP streams at
// once, a connection per copy, each drained into a buffer. A heal does
// both at once and more (it verifies each copy, syncs its directory,
// records it), so its rate is at most the lower of the two.
type Limit struct{ Disk, Loopback float64 }

// Rate is the limit: the lower of the two.
func (l Limit) Rate() float64 { return min(l.Disk, l.Loopback) }

// Best is the higher of l and o, half by half: a limit is what the
// machine can do, and a measurement taken while another process loaded it
// says less (on this shared machine a disk half read 575 MB/s before a
// heal that moved 1,359 MB/s). The heal's runs measure before the kill
// and again after the heal, and keep the best.
func (l Limit) Best(o Limit) Limit {
	return Limit{Disk: max(l.Disk, o.Disk), Loopback: max(l.Loopback, o.Loopback)}
}

// Check is nil when rate (a heal's bytes per second) is within the limit,
// and otherwise an error naming both: a heal cannot move bytes faster than
// the machine does for its pattern, so the limit was mismeasured and no
// ratio to it may be reported.
func (l Limit) Check(rate float64) error {
	if rate <= l.Rate() {
		return nil
	}
	return fmt.Errorf("healrun: the heal moved %.0f MB/s, above its limit of %.0f MB/s (disk %.0f, loopback %.0f) measured for its pattern in the same run: the limit is wrong, no ratio to it is reported",
		rate/1e6, l.Rate()/1e6, l.Disk/1e6, l.Loopback/1e6)
}

// MeasureLimit measures the limit for p in dir (on the brokers'
// filesystem), the disk then loopback, with the files removed after.
func MeasureLimit(dir string, p Pattern) (Limit, error) {
	if err := p.validate(); err != nil {
		return Limit{}, err
	}
	var l Limit
	var err error
	if l.Disk, err = diskPattern(osLimitFS{}, nil).rate(dir, p); err != nil {
		return l, fmt.Errorf("healrun: disk limit: %w", err)
	}
	if l.Loopback, err = loopbackRate(dir, p); err != nil {
		return l, fmt.Errorf("healrun: loopback limit: %w", err)
	}
	return l, nil
}

func (p Pattern) validate() error {
	if p.Targets < 1 || p.CopyBytes < 1 || p.Bytes < int64(p.Targets) {
		return fmt.Errorf("healrun: limit of %d bytes onto %d targets in copies of %d bytes: want at least a byte per target and a positive copy size",
			p.Bytes, p.Targets, p.CopyBytes)
	}
	return nil
}

// share is the bytes of stream i of the Targets (the first ones take the
// remainder).
func (p Pattern) share(i int) int64 {
	per := p.Bytes / int64(p.Targets)
	if int64(i) < p.Bytes%int64(p.Targets) {
		per++
	}
	return per
}

// limitFile is a file the disk pattern writes: what catch-up writes
// through, and the fdatasync that ends a copy.
type limitFile interface {
	catchup.File
	Datasync() error
}

// limitFS creates and removes the pattern's files: a seam, so that a test
// can count what a writer does to each copy.
type limitFS interface {
	Create(path string) (limitFile, error)
	Remove(path string) error
}

type osLimitFS struct{}

func (osLimitFS) Create(path string) (limitFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osLimitFile{f}, nil
}

func (osLimitFS) Remove(path string) error { return os.Remove(path) }

type osLimitFile struct{ *os.File }

func (f osLimitFile) Datasync() error { return unix.Fdatasync(int(f.Fd())) }

// writer is the disk half of the limit: fs's files, written with
// catchup.WriteLikeTarget through writeback (nil: sync_file_range).
type writer struct {
	fs        limitFS
	writeback func(f catchup.File, off, n int64, wait bool) error
}

func diskPattern(fs limitFS, writeback func(catchup.File, int64, int64, bool) error) writer {
	return writer{fs: fs, writeback: writeback}
}

// rate runs p's Targets writers at once in dir and returns the bytes per
// second of the whole; the files are removed after the clock stopped.
func (w writer) rate(dir string, p Pattern) (float64, error) {
	src := bytes.Repeat([]byte{0x5a}, 1<<20)
	var wg sync.WaitGroup
	errs := make([]error, p.Targets)
	paths := make([][]string, p.Targets)
	start := time.Now()
	for i := range p.Targets {
		wg.Go(func() { paths[i], errs[i] = w.copies(dir, i, p.share(i), p.CopyBytes, src) })
	}
	wg.Wait()
	took := time.Since(start)
	for _, ps := range paths {
		for _, path := range ps {
			w.fs.Remove(path)
		}
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(p.Bytes) / took.Seconds(), nil
}

// copies writes writer i's n bytes as copies of at most copyBytes, each
// written as a target writes it and ended by one fdatasync; it returns the
// files it created.
func (w writer) copies(dir string, i int, n, copyBytes int64, src []byte) ([]string, error) {
	var paths []string
	for c, done := 0, int64(0); done < n; c++ {
		size := min(copyBytes, n-done)
		path := filepath.Join(dir, fmt.Sprintf("limit-disk-%d-%d", i, c))
		f, err := w.fs.Create(path)
		if err != nil {
			return paths, err
		}
		paths = append(paths, path)
		err = catchup.WriteLikeTarget(f, size, src, w.writeback)
		if err == nil {
			err = f.Datasync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("copy %s: %w", path, err)
		}
		done += size
	}
	return paths, nil
}

// loopbackRate sends each of p's Targets streams' share over loopback TCP
// at once with sendfile, a connection per copy (each stream listening on
// its own port), from one page-cached file of a copy's bytes; each
// connection is drained by a reader into a 1 MiB buffer. Bytes per second
// of the whole.
func loopbackRate(dir string, p Pattern) (float64, error) {
	path := filepath.Join(dir, "limit-net")
	defer os.Remove(path)
	size := min(p.CopyBytes, p.share(0))
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xa5}, int(size)), 0o644); err != nil {
		return 0, err
	}
	lns := make([]net.Listener, p.Targets)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer ln.Close()
		lns[i] = ln
	}
	errs := make([]error, p.Targets)
	var wg sync.WaitGroup
	start := time.Now()
	for i, ln := range lns {
		wg.Go(func() {
			for done, n := int64(0), p.share(i); done < n && errs[i] == nil; done += min(size, n-done) {
				errs[i] = sendCopy(ln, path, min(size, n-done))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(p.Bytes) / took.Seconds(), nil
}

// sendCopy dials ln (which only this stream dials), sends n bytes of path
// over the connection with sendfile and drains what the accepted end
// receives.
func sendCopy(ln net.Listener, path string, n int64) error {
	errc := make(chan error, 1)
	go func() { errc <- sendFileTo(ln.Addr().String(), path, n) }()
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	got, err := drain(conn, make([]byte, 1<<20))
	conn.Close()
	if serr := <-errc; serr != nil {
		return serr
	}
	if err == nil && got != n {
		err = fmt.Errorf("%d of %d bytes arrived", got, n)
	}
	return err
}

// drain reads r into buf until EOF, in reads of up to len(buf) (not
// io.Copy to io.Discard, whose ReadFrom reads 8 KiB at a time).
func drain(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func sendFileTo(addr, path string, n int64) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var sent int64
	var serr error
	werr := raw.Write(func(fd uintptr) bool {
		for sent < n {
			off := sent
			m, err := unix.Sendfile(int(fd), int(f.Fd()), &off, int(min(n-sent, 1<<30)))
			if err == unix.EAGAIN {
				return false
			}
			if err != nil {
				serr = err
				return true
			}
			sent += int64(m)
		}
		return true
	})
	if werr != nil {
		return werr
	}
	return serr
}
