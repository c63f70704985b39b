//go:build !linux

package catchup

import (
	"syscall"
	"time"
)

// Without Linux's sendfile(2)/splice(2) semantics ModeZeroCopy falls back
// to the read/write path.

func sendfileStep(syscall.Conn, File, int64, *counters) (func(int64, int, *keepAlive) (int, error), bool) {
	return nil, false
}

func spliceStep(syscall.Conn, File, int64, *counters, int, time.Duration) (func(int64, int, *keepAlive) (int, error), func(), bool) {
	return nil, nil, false
}

func preallocate(File, int64, int64) {}

// syncFileRange is nil: no write-behind without sync_file_range(2).
var syncFileRange writebackFunc

var errTooManyFiles error = syscall.EMFILE
