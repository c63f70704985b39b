package stage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The operator's commands of the lifecycle stages (decommission,
// maintenance, rebalance) go through the malachi CLI when Options.CLI
// names it, each judged by what it prints, else through the admin API.

// cliTimeout bounds one run of the CLI.
const cliTimeout = 30 * time.Second

// command gives an operator's command: `malachi args...` (e.CLI), which
// must exit 0 and print want, noted in fr; without the CLI, api on the
// leader's admin client.
func (e *Env) command(ctx context.Context, fr *Report, want string, api func(*admin.Client) error, args ...string) error {
	if e.CLI == "" {
		return api(e.C.LeaderClient(ctx))
	}
	out, err := e.cli(ctx, args...)
	if err != nil {
		return err
	}
	if !strings.Contains(out, want) {
		return fmt.Errorf("`malachi %s` printed %q, want it to say %q", strings.Join(args, " "), out, want)
	}
	addNote(fr, "malachi %s printed %q", args[0], want)
	return nil
}

// decommission starts draining broker b (cancel: puts it back to active)
// as the operator does, through command.
func (e *Env) decommission(ctx context.Context, fr *Report, b *harness.Broker, cancel bool) error {
	if cancel {
		return e.command(ctx, fr, "decommission cancelled", func(cl *admin.Client) error {
			_, err := cl.CancelDecommission(ctx, b.ID)
			return err
		}, "decommission", b.ID.String(), "--cancel")
	}
	return e.command(ctx, fr, "decommissioning", func(cl *admin.Client) error {
		_, err := cl.Decommission(ctx, b.ID)
		return err
	}, "decommission", b.ID.String())
}

// statusSays checks that `malachi status` says each of wants, noted in
// fr; it returns what it lacks ("" when nothing, or without the CLI).
func (e *Env) statusSays(ctx context.Context, fr *Report, wants ...string) string {
	if e.CLI == "" {
		return ""
	}
	out, err := e.cli(ctx, "status")
	for _, w := range wants {
		if !strings.Contains(out, w) {
			return fmt.Sprintf("`malachi status` does not say %q (%v):\n%s", w, err, out)
		}
		addNote(fr, "malachi status printed %q", w)
	}
	return ""
}

// cli runs `malachi args...` as the cluster's operator against the
// leader's admin API (another running broker's while none is known: it
// forwards to the leader) and returns what it printed, stdout then
// stderr; an exit status other than 0 is an error naming the command and
// its stderr.
func (e *Env) cli(ctx context.Context, args ...string) (string, error) {
	b := e.C.Leader(ctx)
	if run := e.C.Running(); b == nil && len(run) > 0 {
		b = run[0]
	}
	if b == nil {
		return "", errors.New("no running broker to give the operator's command to")
	}
	cctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	full := append(append(append([]string{}, args...), "--admin", b.Admin), e.C.CLIFlags()...)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(cctx, e.CLI, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("`malachi %s`: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String() + errb.String(), err
}
