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
)

// Floor is what this machine does, just before a heal, for the heal's
// work of moving n bytes onto k target brokers, in bytes per second: the
// disk's sequential write rate (k files of n/k bytes written at once in
// 1 MiB writes into the brokers' filesystem, each synced, as a committed
// backfill is) and the loopback rate (k sendfile streams of a page-cached
// file over loopback TCP at once, drained into a buffer).
type Floor struct{ Disk, Loopback float64 }

// Rate is the floor: the lower of the two.
func (f Floor) Rate() float64 { return min(f.Disk, f.Loopback) }

// MeasureFloor measures the floor for n bytes onto targets brokers, in dir
// (on the brokers' filesystem).
func MeasureFloor(dir string, n int64, targets int) (Floor, error) {
	if targets < 1 || n < int64(targets) {
		return Floor{}, fmt.Errorf("healrun: floor of %d bytes onto %d targets: want at least a byte per target", n, targets)
	}
	per := n / int64(targets)
	var f Floor
	var err error
	if f.Disk, err = diskWriteRate(dir, per, targets); err != nil {
		return f, fmt.Errorf("healrun: disk floor: %w", err)
	}
	if f.Loopback, err = loopbackRate(dir, min(per, 1<<30), targets); err != nil {
		return f, fmt.Errorf("healrun: loopback floor: %w", err)
	}
	return f, nil
}

// diskWriteRate writes streams files of per bytes at once in dir and
// syncs each; it returns the bytes per second of the whole.
func diskWriteRate(dir string, per int64, streams int) (float64, error) {
	buf := bytes.Repeat([]byte{0x5a}, 1<<20)
	var wg sync.WaitGroup
	errs := make([]error, streams)
	start := time.Now()
	for i := range streams {
		wg.Go(func() {
			path := filepath.Join(dir, fmt.Sprintf("floor-disk-%d", i))
			defer os.Remove(path)
			errs[i] = writeSynced(path, buf, per)
		})
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(per*int64(streams)) / took.Seconds(), nil
}

func writeSynced(path string, buf []byte, n int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), n-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// loopbackRate sends a file of per bytes (written, so in the page cache)
// over streams loopback TCP connections at once with sendfile, each
// drained by a reader into a 1 MiB buffer; bytes per second of the whole.
func loopbackRate(dir string, per int64, streams int) (float64, error) {
	path := filepath.Join(dir, "floor-net")
	defer os.Remove(path)
	if err := writeSynced(path, bytes.Repeat([]byte{0xa5}, 1<<20), per); err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	errs := make(chan error, 2*streams)
	var wg sync.WaitGroup
	start := time.Now()
	for range streams {
		wg.Go(func() { errs <- sendFileTo(ln.Addr().String(), path, per) })
		wg.Go(func() {
			conn, err := ln.Accept()
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			got, err := io.CopyBuffer(io.Discard, conn, make([]byte, 1<<20))
			if err == nil && got != per {
				err = fmt.Errorf("%d of %d bytes arrived", got, per)
			}
			errs <- err
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(per*int64(streams)) / took.Seconds(), nil
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
