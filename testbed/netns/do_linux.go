package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// availableOS: Linux has network namespaces.
func availableOS() error { return nil }

// Do runs f inside host i's network namespace and returns its error:
// on a goroutine locked to an OS thread that setns'd into the namespace
// and is never unlocked (the runtime ends the thread with the goroutine,
// so no other goroutine ever runs there). Sockets f opens stay in the
// namespace after it returns.
func (nt *Net) Do(i int, f func() error) error {
	if err := nt.check(i); err != nil {
		return err
	}
	return inNamespace("/run/netns/"+nt.NS(i), f)
}

// inNamespace runs f on a fresh thread in the network namespace at path.
func inNamespace(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := os.Open(path)
		if err != nil {
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: setns %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
