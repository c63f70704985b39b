//go:build tools

// Package deps pins the modules the project builds on, so that every package
// written in parallel finds them in go.mod. It is never compiled.
package deps

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/cockroachdb/datadriven"
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/hashicorp/raft"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rs/zerolog"
	_ "github.com/schollz/progressbar/v3"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/time/rate"
	_ "pgregory.net/rapid"
)
