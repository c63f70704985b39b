package catchup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"golang.org/x/sys/unix"
)

// BenchmarkSplicePipe measures why the splice receiver's pipe size
// matters more for a sendfile sender than for a write sender. sendfile
// hands TCP the source's page-cache pages by reference, so the receiving
// socket holds skbs of small (page-sized) fragments; each fragment takes
// one pipe slot, so a default 64 KiB pipe (16 slots) moves about 64 KiB per
// splice call. A write(2) sender's skbs carry the data in 32 KiB page
// fragments, so the same 16 slots hold up to 512 KiB. With a 1 MiB pipe
// (256 slots, what catchup asks for) both move a full chunk per call.
// Server and client run in this one process; cpu-s/GB is the process's.
func BenchmarkSplicePipe(b *testing.B) {
	const size = 256 << 20
	for _, send := range []Mode{ModeZeroCopy, ModeReadWrite} {
		for _, pipe := range []int{64 << 10, maxChunk} {
			b.Run(fmt.Sprintf("send=%s/pipe=%dKiB", send, pipe>>10), func(b *testing.B) {
				fx := newFixture(b, size, Limits{}, send, ModeZeroCopy)
				fx.cl.pipeSize = pipe
				target := filepath.Join(fx.sink.dir, string(fx.seg.ID))
				var ru0, ru1 unix.Rusage
				b.ResetTimer()
				unix.Getrusage(unix.RUSAGE_SELF, &ru0)
				start := time.Now()
				for range b.N {
					os.Remove(target)
					if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(b, nil), noCommitSink{fx.sink}, nil); err != nil {
						b.Fatal(err)
					}
				}
				wall := time.Since(start)
				unix.Getrusage(unix.RUSAGE_SELF, &ru1)
				gb := float64(b.N) * size / 1e9
				cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
				b.ReportMetric(gb*1e3/wall.Seconds(), "MB/s")
				b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
				b.ReportMetric(float64(fx.cl.Stats().Splice)/float64(b.N), "splices/op")
			})
		}
	}
}

// noCommitSink is a fileSink whose Commit checks nothing (the benchmark
// measures the transport).
type noCommitSink struct{ s *fileSink }

type noCommitTarget struct{ *fileTarget }

func (n noCommitSink) OpenTarget(seg meta.Segment) (Target, error) {
	t, err := n.s.OpenTarget(seg)
	if err != nil {
		return nil, err
	}
	return noCommitTarget{t.(*fileTarget)}, nil
}

func (t noCommitTarget) Commit() error { return t.f.Close() }
