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
)

const usage = `malachi: the operator CLI of Malachi heal

usage:
  malachi status --admin host:port [--json]
  malachi plan   --admin host:port [--json]
  malachi load   --admin host:port --segments N --records R --size B [--prefix p]
  malachi release --admin host:port   (lift a mass-failure hold for the next pass)
  malachi decommission ID [--cancel] --admin host:port   (drain a broker; status shows progress)
  malachi maintenance ID --for 30m | --end --admin host:port   (absence is not a failure until then)
  malachi cert   create-ca | create-broker ID --host H... | create-client NAME --role R | list

status, plan, load and release speak mutual TLS with a client certificate:
--certs-dir DIR (default $MALACHI_CERTS_DIR, else ./certs) holds ca.crt and
client.NAME.crt/.key, --user NAME chooses one (default: the only one), and
--insecure speaks plaintext to a cluster run with insecure = true. status
and plan need role viewer or operator; load and release role operator.

Run "malachi <command> -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit: 0 success, 1 failure, 2 a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go func() {
		// After the first signal, a second one kills the CLI at once.
		<-ctx.Done()
		stop()
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "status":
		err = runStatus(ctx, rest, stdout, stderr)
	case "plan":
		err = runPlan(ctx, rest, stdout, stderr)
	case "load":
		err = runLoad(ctx, rest, stdout, stderr)
	case "release":
		err = runRelease(ctx, rest, stdout, stderr)
	case "decommission":
		err = runDecommission(ctx, rest, stdout, stderr)
	case "maintenance":
		err = runMaintenance(ctx, rest, stdout, stderr)
	case "cert":
		err = runCert(rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "malachi: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return reportErr(stderr, err)
}

func reportErr(stderr io.Writer, err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, err)
		return 2
	default:
		msg := err.Error()
		if !strings.HasPrefix(msg, "malachi: ") {
			msg = "malachi: " + msg
		}
		fmt.Fprintln(stderr, msg)
		return 1
	}
}
