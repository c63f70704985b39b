package pebblelog

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"
)

// New returns a pebble.Logger that writes to l with component=pebble and
// the given store name (e.g. "confirm", "raft-log", "scrub").
func New(l zerolog.Logger, store string) pebble.Logger {
	return logger{l.With().Str("component", "pebble").Str("pebble_store", store).Logger()}
}

type logger struct{ l zerolog.Logger }

func (p logger) Infof(format string, args ...any) { p.l.Info().Msg(line(format, args)) }

func (p logger) Errorf(format string, args ...any) { p.l.Error().Msg(line(format, args)) }

// line formats one message without the newline Pebble ends most with.
func line(format string, args []any) string {
	return strings.TrimSpace(fmt.Sprintf(format, args...))
}

// Fatalf logs at fatal level and panics: Pebble calls it on a broken
// invariant and does not expect it to return.
func (p logger) Fatalf(format string, args ...any) {
	msg := line(format, args)
	p.l.WithLevel(zerolog.FatalLevel).Msg(msg)
	panic("pebble: " + msg)
}
