// Package engine names the I/O engines that probe and fsync choose between:
// io_uring, plain system calls, or the automatic choice of the two. It
// holds the names only; each package documents what its engines do.
package engine

import "fmt"

// Kind names an engine. The zero value is Auto.
type Kind uint8

const (
	// Auto (a configuration, never a chosen engine) uses io_uring where the
	// kernel allows it and plain system calls otherwise.
	Auto Kind = iota
	// URing batches operations through an io_uring ring.
	URing
	// Syscall makes one system call per operation.
	Syscall
)

// String is the name used in configuration and metric labels: "auto",
// "uring", "syscall".
func (k Kind) String() string {
	switch k {
	case Auto:
		return "auto"
	case URing:
		return "uring"
	case Syscall:
		return "syscall"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Parse is the inverse of String.
func Parse(s string) (Kind, error) {
	for _, k := range []Kind{Auto, URing, Syscall} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown engine %q (want auto, uring or syscall)", s)
}
