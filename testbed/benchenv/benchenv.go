package benchenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Load is the 1, 5 and 15 minute load averages of /proc/loadavg.
type Load struct{ One, Five, Fifteen float64 }

// String is "one five fifteen", as /proc/loadavg writes them.
func (l Load) String() string {
	return fmt.Sprintf("%.2f %.2f %.2f", l.One, l.Five, l.Fifteen)
}

// ReadLoad reads the load averages; where /proc/loadavg is missing or
// unreadable it says so in its error.
func ReadLoad() (Load, error) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return Load{}, fmt.Errorf("benchenv: load average: %w", err)
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return Load{}, fmt.Errorf("benchenv: load average: %q: want three numbers", raw)
	}
	var l Load
	for i, dst := range []*float64{&l.One, &l.Five, &l.Fifteen} {
		if *dst, err = strconv.ParseFloat(f[i], 64); err != nil {
			return Load{}, fmt.Errorf("benchenv: load average %q: %w", f[i], err)
		}
	}
	return l, nil
}

// Metric is what a benchmark reports a figure through (*testing.B).
type Metric interface {
	ReportMetric(n float64, unit string)
}

// ReportLoad reports the one-minute load average as the metric "load1"
// (-1 when it cannot be read, so a round never passes without one).
func ReportLoad(b Metric) {
	l, err := ReadLoad()
	if err != nil {
		b.ReportMetric(-1, "load1")
		return
	}
	b.ReportMetric(l.One, "load1")
}

// ProcessCPU is the user plus system CPU time of the whole process so far,
// every thread included (io_uring's io-wq workers are threads of the
// process on Linux 5.12 and later).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
