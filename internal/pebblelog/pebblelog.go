package pebblelog

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
)

// Logger is a pebble.Logger (and pebble's LoggerAndTracer's logging half)
// writing to zerolog. Build it with New.
type Logger struct {
	l       zerolog.Logger
	onFatal func(msg string)
}

// New returns a Logger that writes to l with component=pebble and the
// given store name (e.g. "confirm", "raft-log", "scrub"). l is the host's
// logger: it must not carry a "component" field of its own, or the line
// would carry the key twice.
func New(l zerolog.Logger, store string) Logger {
	return Logger{l: l.With().Str("component", "pebble").Str("pebble_store", store).Logger()}
}

// OnFatal returns a copy of p that calls f with the message when Pebble
// reports a fatal error, before logging it and panicking (the store marks
// its confirmation DB failed there).
func (p Logger) OnFatal(f func(msg string)) Logger {
	p.onFatal = f
	return p
}

// Infof logs at info level.
func (p Logger) Infof(format string, args ...any) { p.l.Info().Msg(line(format, args)) }

// Errorf logs at error level.
func (p Logger) Errorf(format string, args ...any) { p.l.Error().Msg(line(format, args)) }

// line formats one message without the newline Pebble ends most with.
func line(format string, args []any) string {
	return strings.TrimSpace(fmt.Sprintf(format, args...))
}

// Fatalf calls the OnFatal hook, logs at fatal level and panics: Pebble
// calls it on a broken invariant or a failed MANIFEST or WAL write and
// does not expect it to return.
func (p Logger) Fatalf(format string, args ...any) {
	msg := line(format, args)
	if p.onFatal != nil {
		p.onFatal(msg)
	}
	p.l.WithLevel(zerolog.FatalLevel).Msg(msg)
	panic("pebble: " + msg)
}
