package catchup

import (
	"fmt"
	"sync/atomic"
)

// WriteLikeTarget writes n bytes into f from offset 0 (src repeated) the
// way a zero-copy target without a byte cap writes a received copy: the
// range reserved first (preallocate), then chunks of spliceChunk bytes,
// each in writes of at most maxChunk (the splice pipe's size), the
// write-behind told after each chunk what landed (DefaultWriteBehind
// windows) and the tail's writeback started after the last byte. It does
// not sync: the fdatasync that ends a copy (the Commit's) is the
// caller's. writeback starts (wait false) or completes (wait true) the
// writeback of f's bytes [off, off+n); nil is sync_file_range(2) (no
// write-behind off Linux). A failed write or writeback is returned with
// the offset it failed at.
//
// It exists so that a heal's limit (testbed/healrun) measures the disk for
// exactly catch-up's pattern, and follows it when the constants change.
func WriteLikeTarget(f File, n int64, src []byte, writeback func(f File, off, n int64, wait bool) error) error {
	if len(src) == 0 && n > 0 {
		return fmt.Errorf("catchup: writing %d bytes like a target: no source bytes", n)
	}
	if writeback == nil {
		writeback = syncFileRange
	}
	var calls atomic.Uint64
	wb := newWriteBehind(f, 0, DefaultWriteBehind, writeback, &calls)
	preallocate(f, 0, n)
	for done := int64(0); done < n; {
		end := min(n, done+spliceChunk)
		for done < end {
			m, err := f.WriteAt(src[:min(int64(len(src)), maxChunk, end-done)], done)
			done += int64(m)
			if err != nil {
				return fmt.Errorf("catchup: writing like a target at byte %d: %w", done, err)
			}
		}
		if err := wb.landed(done); err != nil {
			return err
		}
	}
	return wb.flush(n)
}
