//go:build !linux

package netns

import "errors"

// availableOS: network namespaces are Linux's.
func availableOS() error { return errors.New("netns: network namespaces need Linux") }

// Do cannot run anywhere but on Linux.
func (nt *Net) Do(i int, f func() error) error { return availableOS() }
