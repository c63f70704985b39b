package loopdisk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A Disk is an ext4 file system in a sparse image file, attached to a
// loop device and mounted at Dir with errors=remount-ro.
type Disk struct {
	Image string // the sparse image file
	Dev   string // /dev/loopN
	Dir   string // the mount point
	Size  int64  // bytes of the image
}

// ErrNoDevice marks Create's failure to attach a loop device (none free,
// or none the container may use): an environment's limit, not a fault.
var ErrNoDevice = errors.New("loopdisk: no loop device attached")

// Unavailable says why a loop-mounted ext4 cannot be made here, or "".
func Unavailable() string {
	if os.Geteuid() != 0 {
		return fmt.Sprintf("needs root to attach a loop device and mount ext4 (running as uid %d)", os.Geteuid())
	}
	for _, tool := range []struct{ name, pkg string }{
		{"losetup", "mount"}, {"mkfs.ext4", "e2fsprogs"}, {"mount", "mount"}, {"umount", "mount"}, {"e2fsck", "e2fsprogs"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Sprintf("needs %s (Debian package %s; `make deps` installs it) to loop-mount ext4: %v", tool.name, tool.pkg, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Sprintf("no loop devices: %v", err)
	}
	return ""
}

func runTool(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Create makes a size-byte (whole MiB) sparse image, formats it ext4 (4 KiB blocks,
// no blocks reserved for root: the caller runs as root and the disk must be
// able to fill) and mounts it at dir with errors=remount-ro. On an error
// nothing is left attached or mounted.
func Create(image, dir string, size int64) (*Disk, error) {
	if why := Unavailable(); why != "" {
		return nil, errors.New(why)
	}
	if size < 8<<20 || size%(1<<20) != 0 {
		return nil, fmt.Errorf("loop disk %s: size %d bytes: want a whole number of MiB, at least 8", image, size)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("loop disk mount point: %w", err)
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loop disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(image)
		return nil, fmt.Errorf("loop disk image %s: %w", image, err)
	}
	// stdout only: losetup's warnings go to stderr.
	cmd := exec.Command("losetup", "--find", "--show", image)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dev := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(dev, "/dev/loop") || strings.ContainsAny(dev, " \n") {
		if strings.HasPrefix(dev, "/dev/loop") {
			exec.Command("losetup", "-d", dev).Run()
		}
		os.Remove(image)
		return nil, fmt.Errorf("%w (losetup --find --show %s): %v: %s%s", ErrNoDevice, image, err, out, strings.TrimSpace(stderr.String()))
	}
	l := &Disk{Image: image, Dev: dev, Dir: dir, Size: size}
	if _, err := runTool("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", l.Dev); err != nil {
		l.detach()
		return nil, err
	}
	if err := l.Mount(); err != nil {
		l.detach()
		return nil, err
	}
	return l, nil
}

// Mount mounts the file system again (after Unmount).
func (l *Disk) Mount() error {
	if _, err := runTool("mount", "-t", "ext4", "-o", "errors=remount-ro", l.Dev, l.Dir); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", l.Dev, l.Dir, err)
	}
	return nil
}

// MoveTo moves the mount from Dir to dir (mount --move), over whatever
// dir holds; dir becomes Dir.
func (l *Disk) MoveTo(dir string) error {
	if _, err := runTool("mount", "--move", l.Dir, dir); err != nil {
		return err
	}
	l.Dir = dir
	return nil
}

// Mounted reports whether Dir is a mount point of Dev (/proc/self/mounts).
func (l *Disk) Mounted() bool {
	_, ok := l.mountOptions()
	return ok
}

// mountOptions returns the options /proc/self/mounts lists for Dev on Dir.
func (l *Disk) mountOptions() ([]string, bool) {
	opts, ok, err := mountEntry(l.Dev, l.Dir)
	return opts, ok && err == nil
}

// IsMountPoint reports whether /proc/self/mounts lists dir as a mount
// point, of any device.
func IsMountPoint(dir string) (bool, error) {
	_, ok, err := mountEntry("", dir)
	return ok, err
}

// mountEntry finds dir's line in /proc/self/mounts (of dev, or any device
// when dev is "") and returns its options.
func mountEntry(dev, dir string) ([]string, bool, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, false, fmt.Errorf("loopdisk: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) >= 4 && (dev == "" || f[0] == dev) && unescapeMount(f[1]) == dir {
			return strings.Split(f[3], ","), true, nil
		}
	}
	return nil, false, nil
}

// unescapeMount undoes /proc/mounts' octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Unmount unmounts Dir, retrying while it is busy (a process that just
// exited may still hold a file for a moment).
func (l *Disk) Unmount() error {
	var err error
	for i := 0; i < 50; i++ {
		if !l.Mounted() {
			return nil
		}
		if _, err = runTool("umount", l.Dir); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("unmounting %s: %w", l.Dir, err)
}

// Fsck runs e2fsck -f -y on the unmounted device. Exit status 1 (errors
// corrected) is success; its output is returned either way.
//
// A device "in use" after its umount is held by a mount namespace that
// copied the mount while it was up (any `ip netns exec` or `unshare -m` of
// the moment, on this machine): such a holder is short-lived, so e2fsck is
// tried again, up to 20 times 250 ms apart, before the error is returned.
func (l *Disk) Fsck() (string, error) {
	var out []byte
	var err error
	for try := 0; ; try++ {
		out, err = exec.Command("e2fsck", "-f", "-y", l.Dev).CombinedOutput()
		if err == nil || try == 19 || !strings.Contains(string(out), "is in use") {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		err = nil
	}
	if err != nil {
		return string(out), fmt.Errorf("e2fsck -f -y %s: %w: %s", l.Dev, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Close unmounts (lazily when a plain umount keeps failing: the mount then
// goes once its last user does), detaches the loop device and removes the
// image. It is safe to call twice.
func (l *Disk) Close() error {
	var errs []error
	if err := l.Unmount(); err != nil {
		errs = append(errs, err)
		if _, lerr := runTool("umount", "-l", l.Dir); lerr != nil {
			errs = append(errs, lerr)
		}
	}
	if err := l.detach(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// detach detaches the loop device (if still attached) and removes the image.
func (l *Disk) detach() error {
	var err error
	if l.attached() {
		if _, err = runTool("losetup", "-d", l.Dev); err == nil {
			// Detaching is asynchronous while the kernel lets go of it.
			for i := 0; i < 50 && l.attached(); i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	if rerr := os.Remove(l.Image); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// attached reports whether Dev is still bound to Image (losetup -j).
func (l *Disk) attached() bool {
	out, err := exec.Command("losetup", "-j", l.Image).Output()
	return err == nil && strings.Contains(string(out), l.Dev+":")
}

// Free returns the bytes an unprivileged writer could still allocate.
func (l *Disk) Free() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(l.Dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", l.Dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// ReadOnly reports whether the mounted file system refuses writes now:
// mounted ro, or (since Linux 6.x, where an ext4 error with
// errors=remount-ro no longer flips the mount itself) listed
// emergency_ro in /proc/self/mounts.
func (l *Disk) ReadOnly() (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(l.Dir, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", l.Dir, err)
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return true, nil
	}
	opts, ok := l.mountOptions()
	if !ok {
		return false, fmt.Errorf("%s is not mounted from %s", l.Dir, l.Dev)
	}
	return slices.Contains(opts, "ro") || slices.Contains(opts, "emergency_ro"), nil
}

// Fill allocates a filler file at path (which must be on this file system)
// so that about leave bytes stay free, and returns the bytes allocated.
// fallocate reserves real blocks without writing them, as a full disk's
// other tenants would; ext4 needs a few blocks for the filler's own extent
// tree, so the request backs off (4 KiB, then doubling) until it fits.
func (l *Disk) Fill(path string, leave int64) (int64, error) {
	free, err := l.Free()
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("filler %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("filler %s: %w", path, err)
	}
	at := fi.Size()
	want := free - leave
	for step := int64(4096); want > 0; step *= 2 {
		err = unix.Fallocate(int(f.Fd()), 0, at, want)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOSPC) {
			return 0, fmt.Errorf("fallocate %s (%d bytes at %d): %w", path, want, at, err)
		}
		want -= step
	}
	if want <= 0 {
		return 0, nil
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("filler %s: %w", path, err)
	}
	return want, nil
}

// GoReadOnly turns the file system read-only under the processes using
// it, as the kernel does on an ext4 error with errors=remount-ro: it
// raises an ext4 error through /sys/fs/ext4/<dev>/trigger_fs_error. Where
// that is missing it falls back to `mount -o remount,ro` (refused with
// EBUSY while a file is open for writing). It returns how, and checks the
// file system reports read-only afterwards.
func (l *Disk) GoReadOnly() (string, error) {
	trig := filepath.Join("/sys/fs/ext4", filepath.Base(l.Dev), "trigger_fs_error")
	how := "ext4 error through " + trig + " (errors=remount-ro)"
	if err := os.WriteFile(trig, []byte("loopdisk: GoReadOnly\n"), 0); err != nil {
		if _, rerr := runTool("mount", "-o", "remount,ro", l.Dir); rerr != nil {
			return "", fmt.Errorf("making %s read-only: %s: %v; %w", l.Dir, trig, err, rerr)
		}
		how = "mount -o remount,ro (no " + trig + ")"
	}
	for i := 0; ; i++ {
		ro, err := l.ReadOnly()
		if err != nil {
			return how, err
		}
		if ro {
			return how, nil
		}
		if i == 50 {
			return how, fmt.Errorf("%s: %s is still writable 1s later", how, l.Dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
