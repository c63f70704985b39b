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

const usage = `malachi: the operator CLI of Malachi heal

usage:
  malachi demo   [--brokers 5] [--rf 3] [--segments 300] [--segment-size 1MiB] [--json] [--keep] [--malachid path] [--faults list] [--insecure]
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
	self, _ := os.Executable()
	os.Exit(runAs(self, os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit and with no binary of its own (the demo's
// lifecycle stages then call the admin API): 0 success, 1 failure (or a
// demo that did not heal), 2 a bad command line.
func run(args []string, stdout, stderr io.Writer) int { return runAs("", args, stdout, stderr) }

// runAs is run as the malachi binary self, through which the demo's
// lifecycle stages give the operator's commands.
func runAs(self string, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go func() {
		// After the first signal, a second one kills the CLI at once (the
		// brokers die with it through their parent-death signal).
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
	case "demo":
		o, perr := demo.ParseFlags(rest, stderr)
		if perr != nil {
			return reportErr(stderr, perr)
		}
		o.CLI = self
		code := demo.Run(ctx, o, stdout, stderr)
		if ctx.Err() != nil && code == 0 {
			code = 1
		}
		return code
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
