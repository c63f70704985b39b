//go:build !linux

package main

import "errors"

// A loopDisk is a loop-mounted ext4 file system: Linux only. Elsewhere
// mountLoop always fails and the diskfull and readonly stages report
// themselves skipped with loopUnavailable's reason.
type loopDisk struct {
	Image, Dev, Dir string
	Size            int64
}

var errNoLoop = errors.New("loop-mounted ext4 needs Linux (losetup, mkfs.ext4, mount)")

func loopUnavailable() string { return errNoLoop.Error() }

func mountLoop(image, dir string, size int64) (*loopDisk, error) { return nil, errNoLoop }

func (l *loopDisk) Mount() error                                 { return errNoLoop }
func (l *loopDisk) MoveTo(dir string) error                      { return errNoLoop }
func (l *loopDisk) Mounted() bool                                { return false }
func (l *loopDisk) Unmount() error                               { return errNoLoop }
func (l *loopDisk) Fsck() (string, error)                        { return "", errNoLoop }
func (l *loopDisk) Close() error                                 { return nil }
func (l *loopDisk) Free() (int64, error)                         { return 0, errNoLoop }
func (l *loopDisk) ReadOnly() (bool, error)                      { return false, errNoLoop }
func (l *loopDisk) Fill(path string, leave int64) (int64, error) { return 0, errNoLoop }
func (l *loopDisk) GoReadOnly() (string, error)                  { return "", errNoLoop }
