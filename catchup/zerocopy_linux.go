package catchup

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The zero-copy data path. Which calls reach the kernel:
//
//   - Source: sendfileStep calls unix.Sendfile (sendfile(2)) with the copy's
//     descriptor as in_fd and the socket as out_fd, inside
//     syscall.RawConn.Write of the *net.TCPConn, so EAGAIN parks the
//     goroutine on Go's network poller and the socket's deadline applies.
//     The page-cache pages of the copy are handed to TCP by reference.
//   - Target: spliceStep calls unix.Splice (splice(2)) in two directions:
//     socket → pipe inside syscall.RawConn.Read (spliceIn:
//     SPLICE_F_NONBLOCK, EAGAIN parks on the poller), then pipe → copy
//     file at an explicit offset (the off_out pointer: the file's own
//     position is never used), in whole units of writeAlign. The pipe is
//     this transfer's own, sized to maxChunk with F_SETPIPE_SZ. Before it,
//     fallocate(2) reserves the range (preallocate), and SO_RCVLOWAT on
//     the socket batches wake-ups (wakeMark).
//
// Neither path goes through io.Copy, so Go's own sendfile/splice/
// copy_file_range fast paths are never involved. TestZeroCopySyscalls
// proves the calls under strace; Stats counts them.

func sendfileStep(sc syscall.Conn, f File, off int64, st *counters) (func(int64, int, *keepAlive) (int, error), bool) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	// The deadline is pushed per chunk only (alive is unused): a blocked
	// sendfile waits until TCP wakes it with about a third of the send
	// buffer free (over 1 MiB with autotuned buffers), so with 1 MiB chunks
	// a wake-up mostly ends the chunk anyway.
	return func(done int64, c int, _ *keepAlive) (int, error) {
		pos := off + done
		sent := 0
		var serr error
		err := rc.Write(func(sock uintptr) bool {
			for sent < c {
				st.sendfile.Add(1)
				m, e := unix.Sendfile(int(sock), int(f.Fd()), &pos, c-sent)
				if m > 0 {
					sent += m
				}
				switch {
				case e == unix.EAGAIN:
					return false // wait until the socket is writable
				case e == unix.EINTR:
					continue
				case e != nil:
					serr = e
					return true
				case m == 0:
					serr = fmt.Errorf("reading the source copy at byte %d: %w", pos, io.ErrUnexpectedEOF)
					return true
				}
			}
			return true
		})
		runtime.KeepAlive(f)
		if err == nil {
			err = serr
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("sendfile: %w", err)
		}
		return sent, err
	}, true
}

func spliceStep(sc syscall.Conn, f File, off int64, st *counters, want int, idle time.Duration) (func(int64, int, *keepAlive) (int, error), func(), bool) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, nil, false
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, false
	}
	pr, pw := p[0], p[1]
	if want <= 0 {
		want = maxChunk
	}
	size := want
	if _, err := unix.FcntlInt(uintptr(pw), unix.F_SETPIPE_SZ, want); err != nil {
		// An unprivileged process may be capped below 1 MiB
		// (/proc/sys/fs/pipe-max-size): use what the pipe has.
		if s, err := unix.FcntlInt(uintptr(pw), unix.F_GETPIPE_SZ, 0); err == nil && s > 0 {
			size = s
		} else {
			size = 1 << 16
		}
	}
	closer := func() { unix.Close(pr); unix.Close(pw) }
	align := int64(writeAlign)
	for align > 4096 && align > int64(size)/4 {
		align /= 2
	}
	mark := wakeMark{rc: rc, budget: min(maxWakeWait, idle/1000)}
	step := func(done int64, c int, alive *keepAlive) (int, error) {
		pos := off + done // the file offset of the pipe's first byte
		got := 0          // bytes written into the file
		queued := 0       // bytes in the pipe, not yet written
		start := time.Now()
		defer func() { mark.observe(got, time.Since(start)) }()
		defer runtime.KeepAlive(f)
		// write moves the pipe's first w bytes into the file at pos.
		write := func(w int) error {
			for w > 0 {
				st.splice.Add(1)
				k, e := unix.Splice(pr, nil, int(f.Fd()), &pos, w, unix.SPLICE_F_MOVE)
				if e == unix.EINTR {
					continue
				}
				if e == nil && k == 0 {
					e = io.ErrNoProgress // the pipe holds w bytes: cannot happen
				}
				if e != nil {
					return &targetError{op: "write", err: fmt.Errorf("splice into the copy at byte %d: %w", pos, e)}
				}
				w -= int(k)
				queued -= int(k)
				got += int(k)
			}
			return nil
		}
		for got < c {
			if left := c - got - queued; left > 0 {
				mark.apply(left)
				m, full, err := spliceIn(rc, pw, min(left, size-queued), queued > 0, st)
				if err != nil {
					// What the pipe holds came from the source: keep it,
					// the store judges it when the transfer resumes.
					if werr := write(queued); werr != nil {
						return got, werr
					}
					return got, err
				}
				if full {
					if err := write(queued); err != nil {
						return got, err
					}
					continue
				}
				queued += m
				if err := alive.touch(); err != nil {
					return got, err
				}
			}
			w := queued
			if got+queued < c {
				w = int((pos+int64(queued))&^(align-1) - pos)
			}
			if w > 0 {
				if err := write(w); err != nil {
					return got, err
				}
			}
		}
		return got, nil
	}
	return step, closer, true
}

// spliceIn moves at most n bytes from the socket into the pipe pw,
// waiting on Go's poller while the socket is empty. pipeBusy says that the
// pipe already holds bytes: then EAGAIN may mean a full pipe instead of an
// empty socket, and when the socket has bytes queued (SIOCINQ) spliceIn
// reports full rather than wait for more, so that the caller empties the
// pipe. It returns io.ErrUnexpectedEOF when the peer closed.
func spliceIn(rc syscall.RawConn, pw, n int, pipeBusy bool, st *counters) (moved int, full bool, err error) {
	var m int64
	var serr error
	err = rc.Read(func(sock uintptr) bool {
		for {
			st.splice.Add(1)
			m, serr = unix.Splice(int(sock), nil, pw, nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case serr == unix.EINTR:
				continue
			case serr != unix.EAGAIN:
				return true
			case pipeBusy:
				if q, e := unix.IoctlGetInt(int(sock), unix.SIOCINQ); e == nil && q > 0 {
					full = true
					return true
				}
			}
			return false
		}
	})
	switch {
	case full:
		return 0, true, nil
	case err == nil && serr != nil:
		err = serr
	case err == nil && m == 0:
		return 0, false, io.ErrUnexpectedEOF
	}
	if err != nil {
		return 0, false, fmt.Errorf("splice from socket: %w", err)
	}
	return int(m), false, nil
}

// writeAlign is the unit in which the splice target writes into the copy
// file: after each splice from the socket it writes only up to the last
// multiple of writeAlign (of the file offset) that the pipe reaches, and
// keeps the rest in the pipe for the next write, except at the end of a
// chunk or of the transfer and when the transfer stops (what the pipe
// holds is written first). Bytes arrive from the socket in pieces of any
// length (loopback skbs are 65,483 bytes); written as they come, each
// write would start and end inside a page, and the page cache (ext4 with
// large folios) would build every folio across two writes, in small
// orders. Aligned writes let it allocate and map large folios whole.
//
// BenchmarkCatchupPaired, 1 GiB, 12 interleaved rounds, medians of the
// per-round ratios: CPU over both ends 0.90-0.91× the unaligned writes
// (128 and 256 KiB alike; 16 KiB 0.96×, 64 KiB 0.88-0.97×), MB/s 1.08×.
// The pipe keeps at most writeAlign-1 bytes between writes, so the unit
// is capped at a quarter of the pipe: a smaller pipe still has room for
// the next splice.
const writeAlign = 128 << 10

// The splice target's wake-up mark. When the target drains the socket
// faster than bytes arrive, every splice finds a few tens of KiB, parks on
// the poller and is woken again: a round trip through epoll, the scheduler
// and Go's netpoller per loopback skb. SO_RCVLOWAT makes the kernel wake
// the reader only once that many bytes are queued (or the peer closed).
// BenchmarkCatchup, 1 GiB, interleaved rounds, medians: a fixed 256 KiB
// mark took 0.71 → 0.58 CPU s/GB over both ends and 940 → 1410 MB/s (9
// rounds, load 8-10); this adaptive one 0.58 → 0.54 and 2310 → 2350 MB/s
// (5 rounds, load 4).
//
// The mark is what arrives in budget at the rate the last chunk measured,
// at most maxWakeMark, at least 1 (the kernel's default), never more than
// the chunk still wants, and rounded down to a power of two so that it is
// set only when it changes. Because the mark never exceeds what the chunk
// still wants, a chunk ends when its last byte lands, as without a mark.
// budget is min(maxWakeWait, IdleTimeout/1000), so a slow or throttled
// source sets a small mark, and a wake-up comes later than without one by
// about budget times the factor the rate fell by within the chunk: only a
// transfer whose rate falls more than a thousandfold within one chunk and
// stays there for IdleTimeout looks idle (the deadline moves as bytes
// land); it is cut and resumes like any cut transfer.
const (
	maxWakeMark = 256 << 10
	maxWakeWait = 10 * time.Millisecond
)

type wakeMark struct {
	rc     syscall.RawConn
	budget time.Duration
	want   int // from the last chunk's rate; 0 before the first
	set    int // the socket's SO_RCVLOWAT; 0 means the default (1)
}

// observe records that a chunk moved n bytes in d.
func (w *wakeMark) observe(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	if d <= 0 {
		w.want = maxWakeMark
		return
	}
	w.want = int(min(float64(maxWakeMark), float64(n)*float64(w.budget)/float64(d)))
}

// apply sets the mark for a read that wants at most left more bytes.
func (w *wakeMark) apply(left int) {
	v := min(w.want, left)
	if v > 1 {
		v = 1 << (bits.Len(uint(v)) - 1)
	} else {
		v = 1
	}
	if v == w.set || (w.set == 0 && v == 1) {
		return
	}
	w.rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, v) == nil {
			w.set = v
		}
	})
}

// preallocate reserves f's blocks for [off, off+n) with fallocate(2)
// (FALLOC_FL_KEEP_SIZE: the file's size still grows only as bytes land),
// so ext4 maps them in one call instead of reserving delayed allocation
// block by block as the pipe's pages are copied in: that reservation was
// the largest part of the splice target's CPU (perf: ext4_da_write_begin
// ~40% of its samples against ~17% for the copy itself). BenchmarkCatchup,
// 1 GiB, 4 interleaved rounds: target 0.68 → 0.41 CPU s/GB, both ends
// 1.01 → 0.72, 1020 → 1390 MB/s (bench/README.md). Best effort: a
// filesystem without fallocate, or a disk too full for the whole range,
// receives as before and fails where a write fails, keeping the frames
// that landed.
func preallocate(f File, off, n int64) {
	_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	runtime.KeepAlive(f)
}

// syncFileRange is the write-behind's writebackFunc: sync_file_range(2)
// with SYNC_FILE_RANGE_WRITE, and with WAIT_BEFORE and WAIT_AFTER too
// when wait is set.
func syncFileRange(f File, off, n int64, wait bool) error {
	flags := unix.SYNC_FILE_RANGE_WRITE
	if wait {
		flags |= unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	}
	defer runtime.KeepAlive(f)
	for {
		if err := unix.SyncFileRange(int(f.Fd()), off, n, flags); err != unix.EINTR {
			return err
		}
	}
}

var errTooManyFiles error = unix.EMFILE
