//go:build !unix

package store

import "os"

func fileIDs(os.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }

func fileChanged(os.FileInfo) (ns int64, ok bool) { return 0, false }
