package demo

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal (progress bars) or not (plain
// lines, for logs and CI).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows one stage's advance: a bar on a terminal, else a line
// whenever the count or the note changes (at most one a second).
type progress struct {
	w         io.Writer
	label     string
	total     int
	bar       *progressbar.ProgressBar
	done      int
	note      string
	lastPrint time.Time
	finished  bool
}

func newProgress(w io.Writer, tty bool, label string, total int) *progress {
	p := &progress{w: w, label: label, total: total, done: -1}
	if tty {
		p.bar = progressbar.NewOptions(max(total, 1),
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(fmt.Sprintf("%-28s", label)),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(50*time.Millisecond),
			progressbar.OptionSetWidth(30),
			progressbar.OptionUseANSICodes(true),
		)
	}
	return p
}

// Set reports done of total (total may grow) with a short note.
func (p *progress) Set(done, total int, note string) {
	if p.finished {
		return
	}
	if total != p.total {
		p.total = total
		if p.bar != nil {
			p.bar.ChangeMax(max(total, 1))
		}
	}
	if p.bar != nil {
		if note != p.note {
			desc := p.label
			if note != "" {
				desc += " (" + note + ")"
			}
			p.bar.Describe(fmt.Sprintf("%-28s", desc))
		}
		_ = p.bar.Set(done)
		p.done, p.note = done, note
		return
	}
	if done == p.done && note == p.note {
		return
	}
	if time.Since(p.lastPrint) < time.Second && done != total {
		return
	}
	p.done, p.note, p.lastPrint = done, note, time.Now()
	if note != "" {
		fmt.Fprintf(p.w, "  %s: %d/%d (%s)\n", p.label, done, total, note)
	} else {
		fmt.Fprintf(p.w, "  %s: %d/%d\n", p.label, done, total)
	}
}

// Finish ends the bar with a closing line.
func (p *progress) Finish(msg string) {
	if p.finished {
		return
	}
	p.finished = true
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "  %s: %s\n", p.label, msg)
}
