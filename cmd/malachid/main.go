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

	"github.com/malachi-log/malachi/broker"
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
		return refuse(stderr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	err = broker.Run(ctx, cfg, broker.NewLogger(cfg, stderr), hup)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, broker.ErrShutdown):
		return 1 // logged by Run
	}
	return refuse(stderr, err)
}

// refuse prints err, named once, and says which exit status it earns: 2
// for a bad configuration, else 1.
func refuse(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, prefixed(err))
	if errors.Is(err, broker.ErrConfig) {
		return 2
	}
	return 1
}

// prefixed is err's message with the command's name in front, once.
func prefixed(err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, "malachid: ") {
		return msg
	}
	return "malachid: " + err.Error()
}
