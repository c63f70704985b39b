package hclogzero

import (
	"fmt"
	"io"
	"log"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// hclogger adapts zerolog to hclog.Logger. Key/value pairs become zerolog
// fields; a name becomes the "component" field.
type hclogger struct {
	log     zerolog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // hclog.Level, shared by With/Named children
}

// New returns an hclog.Logger that writes to log with component=name
// (children made with Named append ".child"). log must not carry a
// "component" field of its own: give it the host's logger, not a
// package's.
func New(log zerolog.Logger, name string) hclog.Logger {
	l := &hclogger{log: log, name: name, level: new(atomic.Int32)}
	l.level.Store(int32(hclog.Debug))
	return l
}

var _ hclog.Logger = (*hclogger)(nil)

func zlevel(level hclog.Level) zerolog.Level {
	switch level {
	case hclog.Trace:
		return zerolog.TraceLevel
	case hclog.Debug:
		return zerolog.DebugLevel
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return zerolog.InfoLevel
	case hclog.Warn:
		return zerolog.WarnLevel
	case hclog.Error:
		return zerolog.ErrorLevel
	case hclog.Off:
		return zerolog.Disabled
	}
	return zerolog.InfoLevel
}

func (l *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if level != hclog.NoLevel && level < hclog.Level(l.level.Load()) {
		return
	}
	e := l.log.WithLevel(zlevel(level))
	if e == nil {
		return
	}
	if l.name != "" {
		e = e.Str("component", l.name)
	}
	e = fields(e, l.implied)
	e = fields(e, args)
	e.Msg(msg)
}

func fields(e *zerolog.Event, args []any) *zerolog.Event {
	for i := 0; i < len(args); i += 2 {
		key := fmt.Sprint(args[i])
		switch key { // keep zerolog's own fields unique
		case zerolog.TimestampFieldName, zerolog.LevelFieldName, zerolog.MessageFieldName, "component", "broker":
			key += "_"
		}
		if i+1 >= len(args) {
			e = e.Interface("EXTRA_VALUE_AT_END", args[i])
			break
		}
		switch v := args[i+1].(type) {
		case hclog.Format: // hclog.Fmt("%+v", x): a format and its arguments
			e = e.Str(key, format(v))
		case error:
			e = e.AnErr(key, v)
		case fmt.Stringer:
			e = e.Stringer(key, v)
		default:
			e = e.Interface(key, v)
		}
	}
	return e
}

// format renders an hclog.Fmt value as hclog does.
func format(v hclog.Format) string {
	if len(v) == 0 {
		return ""
	}
	f, ok := v[0].(string)
	if !ok {
		return fmt.Sprint(v...)
	}
	return fmt.Sprintf(f, v[1:]...)
}

func (l *hclogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hclogger) enabled(level hclog.Level) bool {
	return level >= hclog.Level(l.level.Load()) && zlevel(level) >= l.log.GetLevel() && zlevel(level) >= zerolog.GlobalLevel()
}

func (l *hclogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hclogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hclogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hclogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hclogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *hclogger) ImpliedArgs() []any { return l.implied }

func (l *hclogger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	return &c
}

func (l *hclogger) Name() string { return l.name }

func (l *hclogger) Named(name string) hclog.Logger {
	c := *l
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (l *hclogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

func (l *hclogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }
func (l *hclogger) GetLevel() hclog.Level      { return hclog.Level(l.level.Load()) }

func (l *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{l}
}

// stdWriter turns lines from a standard *log.Logger into info events.
type stdWriter struct{ l *hclogger }

func (w stdWriter) Write(p []byte) (int, error) {
	w.l.Log(hclog.Info, strings.TrimSpace(string(p)))
	return len(p), nil
}
