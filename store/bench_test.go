package store_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// The benchmarks report the store's throughput (MB/s, from SetBytes) and,
// measured in the same run on the same bytes, a raw baseline: raw-MB/s and
// x-raw (store throughput / raw throughput; 1.0 means as fast as raw I/O).

const benchFileBytes = 32 << 20

// rawRead reads path front to back in 1 MiB reads and returns the time.
func rawRead(b *testing.B, path string, buf []byte) time.Duration {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	var off int64
	for {
		n, err := f.ReadAt(buf, off)
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// sealedCopy makes a sealed copy of about benchFileBytes with payloads of
// the given size and returns its segment.
func sealedCopy(b *testing.B, db *store.DB, id meta.SegmentID, payloadSize int) meta.Segment {
	b.Helper()
	if err := db.Create(id, 0); err != nil {
		b.Fatal(err)
	}
	p := bytes.Repeat([]byte{0x5a}, payloadSize)
	n := benchFileBytes / (payloadSize + store.FrameHeaderSize)
	for i := 0; i < n; i++ {
		p[i%payloadSize]++
		if _, err := db.Append(id, p); err != nil {
			b.Fatal(err)
		}
	}
	s, err := db.Seal(id)
	if err != nil {
		b.Fatal(err)
	}
	return meta.Segment{ID: id, StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Sealed: true, Checksum: s.Checksum}
}

func report(b *testing.B, bytesPerOp int64, storeTime, rawTime time.Duration) {
	if rawTime <= 0 || storeTime <= 0 {
		return
	}
	mb := float64(bytesPerOp) * float64(b.N) / 1e6
	b.ReportMetric(mb/rawTime.Seconds(), "raw-MB/s")
	b.ReportMetric(rawTime.Seconds()/storeTime.Seconds(), "x-raw")
}

func benchScan(b *testing.B, what string) {
	for _, ps := range []int{128, 4096} {
		b.Run(fmt.Sprintf("payload=%d", ps), func(b *testing.B) {
			db := open(b, b.TempDir(), store.Options{})
			seg := sealedCopy(b, db, "bench", ps)
			path := db.Path("bench")
			buf := make([]byte, 1<<20)
			rawRead(b, path, buf) // warm the page cache
			b.SetBytes(seg.ByteSize + store.FooterSize)
			b.ReportAllocs()
			b.ResetTimer()
			// Each iteration reads the file raw (timer stopped), then runs
			// the store's scan on it: the two are measured back to back, so
			// the ratio survives a noisy machine.
			ratios := make([]float64, 0, b.N)
			var rawTime, storeTime time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				raw := rawRead(b, path, buf)
				b.StartTimer()
				t0 := time.Now()
				switch what {
				case "durable-end":
					end, err := db.DurableEnd("bench")
					if err != nil || end.Bytes != seg.ByteSize {
						b.Fatalf("DurableEnd = %+v, %v", end, err)
					}
				case "verify":
					if err := db.Verify("bench", seg); err != nil {
						b.Fatal(err)
					}
				}
				st := time.Since(t0)
				rawTime += raw
				storeTime += st
				ratios = append(ratios, raw.Seconds()/st.Seconds())
			}
			b.StopTimer()
			report(b, seg.ByteSize+store.FooterSize, storeTime, rawTime)
			b.ReportMetric(median(ratios), "x-raw-median")
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkDurableEnd scans a sealed 32 MiB copy for its durable end.
func BenchmarkDurableEnd(b *testing.B) { benchScan(b, "durable-end") }

// BenchmarkVerify verifies a sealed 32 MiB copy (every frame's CRC and the
// whole checksum).
func BenchmarkVerify(b *testing.B) { benchScan(b, "verify") }

// BenchmarkAppend appends frames to an active copy (no sync; the copy is
// cut back every 32 MiB); the baseline writes the same encoded frames with
// pwrite to a plain file (encoding included). The two alternate in chunks of
// 1024 frames, so the ratio survives a noisy machine.
func BenchmarkAppend(b *testing.B) {
	for _, ps := range []int{128, 4096} {
		for _, pre := range []int64{0, 4 << 20} {
			b.Run(fmt.Sprintf("payload=%d/prealloc=%d", ps, pre), func(b *testing.B) {
				dir := b.TempDir()
				db := open(b, dir, store.Options{Preallocate: pre})
				if err := db.Create("a", 0); err != nil {
					b.Fatal(err)
				}
				f, err := os.Create(dir + "/raw")
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				p := bytes.Repeat([]byte{1}, ps)
				frame := int64(store.FrameHeaderSize + ps)
				perFile := benchFileBytes / frame
				enc := store.AppendFrame(nil, 0, p)
				var storeTime, rawTime time.Duration
				var ratios []float64
				var written, rawOff int64
				b.SetBytes(frame)
				b.ReportAllocs()
				b.ResetTimer()
				for done := 0; done < b.N; {
					chunk := min(1024, b.N-done)
					if written+int64(chunk) > perFile {
						b.StopTimer()
						if err := db.Truncate("a", 0); err != nil {
							b.Fatal(err)
						}
						if err := f.Truncate(0); err != nil {
							b.Fatal(err)
						}
						written, rawOff = 0, 0
						b.StartTimer()
					}
					t0 := time.Now()
					for i := 0; i < chunk; i++ {
						if _, err := db.Append("a", p); err != nil {
							b.Fatal(err)
						}
					}
					st := time.Since(t0)
					b.StopTimer()
					t0 = time.Now()
					for i := 0; i < chunk; i++ {
						enc = store.AppendFrame(enc[:0], uint64(done+i), p)
						if _, err := f.WriteAt(enc, rawOff); err != nil {
							b.Fatal(err)
						}
						rawOff += frame
					}
					rt := time.Since(t0)
					b.StartTimer()
					storeTime += st
					rawTime += rt
					ratios = append(ratios, rt.Seconds()/st.Seconds())
					written += int64(chunk)
					done += chunk
				}
				b.StopTimer()
				report(b, frame, storeTime, rawTime)
				b.ReportMetric(median(ratios), "x-raw-median")
			})
		}
	}
}

// BenchmarkCRC32C is the CRC's own speed on this machine, for reference.
func BenchmarkCRC32C(b *testing.B) {
	buf := make([]byte, 1<<20)
	tab := crc32.MakeTable(crc32.Castagnoli)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		crc32.Checksum(buf, tab)
	}
}
