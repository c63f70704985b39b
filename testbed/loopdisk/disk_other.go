//go:build !linux

package loopdisk

import "errors"

// A Disk is a loop-mounted ext4 file system: Linux only. Elsewhere Create
// always fails and Unavailable gives the reason.
type Disk struct {
	Image, Dev, Dir string
	Size            int64
}

// ErrUnsupported is every operation's error off Linux.
var ErrUnsupported = errors.New("loopdisk: loop-mounted ext4 needs Linux (losetup, mkfs.ext4, mount)")

// ErrNoDevice marks Create's failure to attach a loop device.
var ErrNoDevice = ErrUnsupported

func Unavailable() string { return ErrUnsupported.Error() }

func Create(image, dir string, size int64) (*Disk, error) { return nil, ErrUnsupported }

func IsMountPoint(dir string) (bool, error) { return false, ErrUnsupported }

func (l *Disk) Mount() error                                 { return ErrUnsupported }
func (l *Disk) MoveTo(dir string) error                      { return ErrUnsupported }
func (l *Disk) Mounted() bool                                { return false }
func (l *Disk) Unmount() error                               { return ErrUnsupported }
func (l *Disk) Fsck() (string, error)                        { return "", ErrUnsupported }
func (l *Disk) Close() error                                 { return nil }
func (l *Disk) Free() (int64, error)                         { return 0, ErrUnsupported }
func (l *Disk) ReadOnly() (bool, error)                      { return false, ErrUnsupported }
func (l *Disk) Fill(path string, leave int64) (int64, error) { return 0, ErrUnsupported }
func (l *Disk) GoReadOnly() (string, error)                  { return "", ErrUnsupported }
