//go:build !unix

package store

import "io"

type noLock struct{}

func (noLock) Close() error { return nil }

// lockDir is a no-op where flock is not available.
func lockDir(string) (io.Closer, error) { return noLock{}, nil }
