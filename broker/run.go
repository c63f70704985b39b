package broker

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/rs/zerolog"
)

// ErrShutdown marks an error of Run's shutdown (Close), which Run has
// logged: the broker had started and served until ctx ended.
var ErrShutdown = errors.New("malachid: shutdown")

// Run opens a broker with cfg (Open), logs that it is ready, reloads its
// certificates on every value of reload (SIGHUP), and closes it once ctx
// ends. A start that fails is logged ("start failed") and its error
// returned as Open's (ErrConfig for a bad configuration); a failed
// shutdown is logged and returned wrapped with ErrShutdown.
func Run(ctx context.Context, cfg Config, log zerolog.Logger, reload <-chan os.Signal) error {
	b, err := Open(ctx, cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		return err
	}
	if cfg.Insecure {
		log.Warn().Msg("INSECURE MODE: every listener is plaintext and accepts anyone who can reach it (insecure = true); loopback only")
	}
	log.Info().Str("admin", b.AdminAddr()).Bool("heal", cfg.Heal.Enabled).Bool("insecure", cfg.Insecure).Msg("broker ready")
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-reload:
			b.ReloadCerts()
		}
	}
	log.Info().Msg("shutting down")
	if err := b.Close(); err != nil {
		log.Error().Err(err).Msg("shutdown")
		return errors.Join(ErrShutdown, err)
	}
	return nil
}

// NewLogger is the broker's logger as cfg's log_level and log_format ask,
// writing to w, every line naming the broker. It sets zerolog's time
// format to milliseconds (zerolog.TimeFieldFormat, process-wide): a pass,
// a backfill and a fault a second apart must be told apart in the logs.
func NewLogger(cfg Config, w io.Writer) zerolog.Logger {
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w}
	}
	lvl, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return zerolog.New(w).Level(lvl).With().Timestamp().Uint32("broker", cfg.ID).Logger()
}
