package stage

import (
	"testing"

	"github.com/malachi-log/malachi/store"
)

func TestRecordShape(t *testing.T) {
	for _, size := range []int64{64, 100, 4096, 65536, 1 << 20, 1<<20 + 1000} {
		n, rs := RecordShape(size)
		frames := int64(n) * int64(rs+store.FrameHeaderSize)
		if n < 1 || rs < 1 || frames > size || frames < size-4096 {
			t.Errorf("RecordShape(%d) = %d × %d: %d bytes of frames", size, n, rs, frames)
		}
	}
	if n, rs := RecordShape(1 << 20); n != 256 || rs != 4080 {
		t.Errorf("RecordShape(1MiB) = %d × %d, want 256 × 4080 (exactly 1 MiB of frames)", n, rs)
	}
}
