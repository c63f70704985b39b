//go:build !linux

package store

import (
	"errors"
	"fmt"
)

// openStatDirs fails where O_PATH is not available: use Path.
func openStatDirs(copies string, shards []string, d *StatDirs) error {
	return fmt.Errorf("stat relative to directories: %w", errors.ErrUnsupported)
}

func closeStatDirs(d *StatDirs) {}
