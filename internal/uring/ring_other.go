//go:build !linux

package uring

import (
	"context"
	"time"
)

// Options tune New; see the Linux build.
type Options struct {
	MaxWorkers   uint32
	NoExtArg     bool
	PollInterval time.Duration
}

// Ring is unavailable off Linux.
type Ring struct{}

// New always fails off Linux with a *RefusedError.
func New(entries uint32, opts Options) (*Ring, error) {
	return nil, &RefusedError{Reason: "io_uring is Linux-only"}
}

// Run: see the Linux build.
func (r *Ring) Run(ctx context.Context, b Batch) error { return ErrClosed }

// Entries: see the Linux build.
func (r *Ring) Entries() uint32 { return 0 }

// InFlight: see the Linux build.
func (r *Ring) InFlight() int { return 0 }

// Close: see the Linux build.
func (r *Ring) Close() error { return nil }
