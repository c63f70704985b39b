//go:build !linux

package fsync

import "errors"

func fsSyncSupported() string { return "syncfs(2) is Linux only" }

func dirDevice(string) (uint64, bool) { return 0, false }

func journaled(string) bool { return false }

func syncFilesystem(string) error { return errors.ErrUnsupported }

func dirtyBytes() (int64, error) { return 0, errors.ErrUnsupported }
