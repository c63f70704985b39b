package catchup

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// File is an open copy as catchup uses it; store.File satisfies it. The
// source side reads it (ReaderAt, or sendfile(2) on Fd), the target side
// writes it (WriterAt, or splice(2) on Fd). Fd must stay valid while a
// transfer uses the File.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Fd returns the open file descriptor.
	Fd() uintptr
}

// Mode selects the data path at one end of a transfer.
type Mode uint8

const (
	// ModeDefault is the path measured faster on this end: see
	// DefaultSendMode and DefaultRecvMode.
	ModeDefault Mode = iota
	// ModeZeroCopy moves bytes without copying them through user space:
	// sendfile(2) from the file to the socket on the source, splice(2)
	// from the socket through a pipe into the file on the target. Only on
	// Linux with a *net.TCPConn (any syscall.Conn); elsewhere it behaves
	// as ModeReadWrite.
	ModeZeroCopy
	// ModeReadWrite copies through a 1 MiB user-space buffer: pread(2)
	// then write(2) on the source, read(2) then pwrite(2) on the target,
	// the same system calls as io.CopyBuffer with a 1 MiB buffer when the
	// socket is hidden from io.ReaderFrom/io.WriterTo.
	ModeReadWrite
)

// The defaults: zero copy at both ends, measured (bench/README.md).
//
// BenchmarkCatchup, 1 GiB in the page cache over loopback, source and
// target in separate processes, interleaved rounds, medians (shared 2-core
// VM, load 0.6-6.6), with the target's preallocation and wake-up mark:
// sendfile→splice 2950 MB/s and 0.52 CPU s/GB over both ends (14 rounds);
// write→splice 2670 and 0.49 (6); io.Copy at both ends 2540 and 0.65 (14);
// iperf3 -P 1 3440 and 0.40 (11). With 4 transfers at once (6 rounds):
// sendfile→splice 1800 MB/s and 0.59, io.Copy 1960 and 0.64. So the
// zero-copy source is the faster one here, and stays the default. It is
// not the cheapest on loopback: with sendfile the source hands TCP its
// page-cache pages by reference, so the only copy left, the target's
// pipe→file copy, reads the source's cold pages from memory (0.27 CPU s/GB
// on the target against 0.23 behind a write(2) source, which copies on its
// own core). Towards a real NIC that copy does not exist and sendfile
// spares the source two copies per byte.
//
// The throwaway measurement had a write(2) source beat sendfile;
// the cause found is the splice pipe's size: a sendfile source's skbs are
// made of page-sized fragments, one pipe slot each, so a default 64 KiB pipe
// (16 slots) moves ~64 KiB per splice call (~8,700 calls per 256 MiB, 1.5
// CPU s/GB in BenchmarkSplicePipe) where the 1 MiB pipe catchup asks for
// needs ~1,100 calls and 0.8 CPU s/GB. A write(2) source's 32 KiB fragments
// hide the problem.
const (
	DefaultSendMode = ModeZeroCopy
	DefaultRecvMode = ModeZeroCopy
)

func (m Mode) String() string {
	switch m {
	case ModeDefault:
		return "default"
	case ModeZeroCopy:
		return "zerocopy"
	case ModeReadWrite:
		return "readwrite"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

func (m Mode) resolve(def Mode) Mode {
	if m == ModeDefault {
		return def
	}
	return m
}

// Stats counts what a Server or a Client did since it was created. The
// system call counts are the calls the data path issued, retries after
// EAGAIN included; they prove which path ran.
type Stats struct {
	Transfers uint64 // transfers that moved every announced byte
	Failed    uint64 // transfers that started and did not
	Bytes     uint64 // copy bytes moved
	Sendfile  uint64 // sendfile(2) calls
	Splice    uint64 // splice(2) calls (socket→pipe and pipe→file)
	Read      uint64 // read(2)/pread(2) calls of ModeReadWrite
	Write     uint64 // write(2)/pwrite(2) calls of ModeReadWrite
	Writeback uint64 // sync_file_range(2) calls of the target's write-behind
	Refused   uint64 // requests and TLS handshakes refused, any code (Server only)
}

type counters struct {
	transfers, failed, bytes, sendfile, splice, read, write, writeback, refused atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Transfers: c.transfers.Load(), Failed: c.failed.Load(), Bytes: c.bytes.Load(),
		Sendfile: c.sendfile.Load(), Splice: c.splice.Load(), Read: c.read.Load(), Write: c.write.Load(),
		Writeback: c.writeback.Load(),
		Refused:   c.refused.Load(),
	}
}

// targetError marks an error of the target file (not of the socket); op
// names what failed ("write", "writeback"), as Failer.Fail takes it.
type targetError struct {
	op  string
	err error
}

func (e *targetError) Error() string { return e.err.Error() }
func (e *targetError) Unwrap() error { return e.err }

// keepAlive pushes a transfer's socket deadline one idle timeout ahead.
// pump refreshes it before every chunk; the splice target's step calls
// touch as bytes land, so a chunk slower than the idle timeout is not cut
// while bytes still move.
type keepAlive struct {
	ctx  context.Context
	conn net.Conn
	idle time.Duration
	last time.Time
}

// refresh pushes the deadline and then reports a cancelled ctx: a
// cancellation that came before it is seen here, one that comes after it
// moves the deadline into the past (pump's AfterFunc) and cuts the next
// wait.
func (a *keepAlive) refresh() error {
	a.last = time.Now()
	if err := a.conn.SetDeadline(a.last.Add(a.idle)); err != nil {
		return err
	}
	return a.ctx.Err()
}

// due reports whether an eighth of the idle timeout passed since the last
// refresh.
func (a *keepAlive) due() bool { return time.Since(a.last) >= a.idle/8 }

// touch refreshes the deadline when it is due; steps call it after moving
// bytes. A nil *keepAlive does nothing.
func (a *keepAlive) touch() error {
	if a == nil || !a.due() {
		return nil
	}
	return a.refresh()
}

// pump moves n bytes in chunks of at most chunk() bytes (asked again
// before each chunk, so a chunk follows Throttle.SetRate), one call of step
// per chunk, counted in th.Moved. Before each chunk it takes the chunk's tokens from the
// throttle and pushes the socket's deadline one idle timeout ahead (step
// may push it again as bytes move); after it, it reports progress.
// Cancelling ctx interrupts a blocked step through the deadline. It
// returns the bytes moved.
func pump(ctx context.Context, conn net.Conn, n int64, chunk func() int, th *Throttle, progress func(int64),
	step func(off int64, c int, alive *keepAlive) (int, error)) (int64, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	alive := &keepAlive{ctx: ctx, conn: conn, idle: th.idle()}
	var done int64
	for done < n {
		c := int(min(int64(chunk()), n-done))
		if err := th.wait(ctx, c); err != nil {
			return done, err
		}
		if err := alive.refresh(); err != nil {
			return done, err
		}
		m, err := step(done, c, alive)
		done += int64(m)
		th.add(m)
		if m > 0 && progress != nil {
			progress(done)
		}
		if err != nil {
			if ctx.Err() != nil {
				return done, fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return done, err
		}
	}
	return done, nil
}

// sendRange writes f[off, off+n) to conn.
func sendRange(ctx context.Context, conn net.Conn, f File, off, n int64, mode Mode, th *Throttle, st *counters, progress func(int64)) (int64, error) {
	if mode == ModeZeroCopy {
		if sc, ok := conn.(syscall.Conn); ok {
			if step, ok := sendfileStep(sc, f, off, st); ok {
				return pump(ctx, conn, n, th.chunkSize, th, progress, step)
			}
		}
	}
	// io.CopyBuffer over wrappers that hide io.ReaderFrom/io.WriterTo,
	// so Go cannot switch to its own sendfile/splice: pread(2) and
	// write(2) through buf.
	buf := make([]byte, min(int64(th.chunkSize()), n))
	return pump(ctx, conn, n, th.chunkSize, th, progress, func(done int64, c int, _ *keepAlive) (int, error) {
		src := io.NewSectionReader(f, off+done, int64(c))
		m, err := io.CopyBuffer(countWriter{conn, &st.write}, countReader{src, &st.read}, buf)
		if err == nil && m < int64(c) {
			err = fmt.Errorf("reading the source copy at byte %d: %w", off+done+m, io.ErrUnexpectedEOF)
		}
		return int(m), err
	})
}

// recvRange reads n bytes from conn into f at off, telling wb (nil: no
// write-behind) what landed, and starts the writeback of the tail once
// every byte landed. An error of the file (not of the socket) is a
// *targetError.
func recvRange(ctx context.Context, conn net.Conn, f File, off, n int64, mode Mode, th *Throttle, st *counters, progress func(int64), pipeSize int, wb *writeBehind) (int64, error) {
	got, err := recvSteps(ctx, conn, f, off, n, mode, th, st, progress, pipeSize, wb)
	if err == nil {
		err = wb.flush(off + got)
	}
	return got, err
}

func recvSteps(ctx context.Context, conn net.Conn, f File, off, n int64, mode Mode, th *Throttle, st *counters, progress func(int64), pipeSize int, wb *writeBehind) (int64, error) {
	if mode == ModeZeroCopy {
		if sc, ok := conn.(syscall.Conn); ok {
			if step, closer, ok := spliceStep(sc, f, off, st, pipeSize, th.idle()); ok {
				defer closer()
				preallocate(f, off, n)
				return pump(ctx, conn, n, th.spliceChunkSize, th, progress, wb.wrap(off, step))
			}
		}
	}
	// io.CopyBuffer over wrappers that hide io.ReaderFrom/io.WriterTo:
	// read(2) from the socket, pwrite(2) into the copy, through buf.
	buf := make([]byte, min(int64(th.chunkSize()), n))
	return pump(ctx, conn, n, th.chunkSize, th, progress, wb.wrap(off, func(done int64, c int, _ *keepAlive) (int, error) {
		dst := &offsetWriter{f: f, off: off + done, n: &st.write}
		m, err := io.CopyBuffer(dst, countReader{io.LimitReader(conn, int64(c)), &st.read}, buf)
		if err == nil && m < int64(c) {
			err = io.ErrUnexpectedEOF
		}
		return int(m), err
	}))
}

// countReader and countWriter count calls and hide every method but Read
// or Write, so io.CopyBuffer finds no io.WriterTo or io.ReaderFrom.
type countReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countReader) Read(b []byte) (int, error) { c.n.Add(1); return c.r.Read(b) }

type countWriter struct {
	w io.Writer
	n *atomic.Uint64
}

func (c countWriter) Write(b []byte) (int, error) { c.n.Add(1); return c.w.Write(b) }

// offsetWriter writes sequentially into f from off with pwrite(2); its
// errors are *targetError.
type offsetWriter struct {
	f   File
	off int64
	n   *atomic.Uint64
}

func (w *offsetWriter) Write(b []byte) (int, error) {
	w.n.Add(1)
	m, err := w.f.WriteAt(b, w.off)
	w.off += int64(m)
	if err != nil {
		return m, &targetError{op: "write", err: err}
	}
	return m, nil
}
