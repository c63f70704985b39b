package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is main without the exit: 0 after a clean shutdown, 2 for a bad
// configuration, 1 for any other failure.
func run(args []string, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "help" {
		args = []string{"-h"} // `malachid help` as `malachid -h`
	}
	cfg, err := loadConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the flag package printed the usage
	}
	if err != nil {
		fmt.Fprintln(stderr, prefixed(err))
		if errors.Is(err, errConfig) {
			return 2
		}
		return 1
	}
	log := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := openBroker(ctx, cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		fmt.Fprintln(stderr, prefixed(err))
		if errors.Is(err, errConfig) {
			return 2
		}
		return 1
	}
	if cfg.Insecure {
		log.Warn().Msg("INSECURE MODE: every listener is plaintext and accepts anyone who can reach it (insecure = true); loopback only")
	}
	log.Info().Str("admin", b.adminAddr).Bool("heal", cfg.Heal.Enabled).Bool("insecure", cfg.Insecure).Msg("broker ready")
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-hup:
			b.reloadCerts()
		}
	}
	log.Info().Msg("shutting down")
	if err := b.Close(); err != nil {
		log.Error().Err(err).Msg("shutdown")
		return 1
	}
	return 0
}

// prefixed is err's message with the command's name in front, once.
func prefixed(err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, "malachid: ") {
		return msg
	}
	return "malachid: " + err.Error()
}

func newLogger(cfg Config, w io.Writer) zerolog.Logger {
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w}
	}
	lvl, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	// Millisecond timestamps: a pass, a backfill and a fault a second
	// apart must be told apart in the logs.
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return zerolog.New(w).Level(lvl).With().Timestamp().Uint32("broker", cfg.ID).Logger()
}
