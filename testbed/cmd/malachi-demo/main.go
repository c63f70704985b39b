package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/malachi-log/malachi/testbed/demo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit: 0 when every stage healed (or -h), 1 a
// failure or a demo that did not heal, 2 a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go func() {
		// After the first signal, a second one kills the demo at once (the
		// brokers die with it through their parent-death signal).
		<-ctx.Done()
		stop()
	}()
	o, err := demo.ParseFlags(args, stderr)
	switch {
	case errors.Is(err, demo.ErrHelp):
		return 0
	case err != nil:
		msg := err.Error()
		if !strings.HasPrefix(msg, "malachi-demo: ") {
			msg = "malachi-demo: " + msg
		}
		fmt.Fprintln(stderr, msg)
		if errors.Is(err, demo.ErrUsage) {
			return 2
		}
		return 1
	}
	code := demo.Run(ctx, o, stdout, stderr)
	if ctx.Err() != nil && code == 0 {
		code = 1
	}
	return code
}
