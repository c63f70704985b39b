package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

// PassFeed reads the heal passes a stage watches from the pass histories
// (GET /v1/passes) of the brokers that run the coordinator: every pass
// that ended at or after from, once, in the order each broker ran it. It
// reads each broker whose history answered, on its last read, that the
// broker leads; when none of them does, it looks the leader up and reads
// that one too, from the first of its passes that ended at or after from.
// A broker that leads and then stops (killed) stays to be read: once it
// runs again it returns the passes it ran before it stopped, after the
// passes of the brokers read meanwhile.
//
// A pass no read can return (the history's bound dropped it before it was
// read, or its numbering skipped it) is a gap: counted in Unread and
// described in Gaps; the observers fail their stage on one. The zero
// value is not usable: use NewPassFeed.
type PassFeed struct {
	from    time.Time
	cur     map[meta.BrokerID]passCursor
	leading map[meta.BrokerID]bool

	// Read counts the passes returned; Unread those the histories
	// numbered that no read can return.
	Read   int
	Unread uint64
	Gaps   []string
	// Leaders are the brokers whose history said they lead, in the order
	// seen: more than one means the leader changed while the feed read.
	Leaders []meta.BrokerID
}

func NewPassFeed(from time.Time) *PassFeed {
	return &PassFeed{from: from, cur: map[meta.BrokerID]passCursor{}, leading: map[meta.BrokerID]bool{}}
}

// passPager reads one page of a broker's pass history: at most limit
// passes (0: the broker's default) after pass since.
type passPager func(ctx context.Context, since uint64, limit int) (plugin.PassHistory, error)

// passReadTimeout bounds one page of a history.
const passReadTimeout = 2 * time.Second

func brokerPager(b *Broker) passPager {
	return func(ctx context.Context, since uint64, limit int) (plugin.PassHistory, error) {
		pctx, cancel := context.WithTimeout(ctx, passReadTimeout)
		defer cancel()
		return b.Client.Passes(pctx, since, limit)
	}
}

// next reads the passes not read yet of the running brokers of c that
// lead (see PassFeed), oldest end first. Its error names the histories
// that did not answer: their passes are read on a later call.
func (f *PassFeed) Next(ctx context.Context, c *Cluster) ([]plugin.PassRecord, error) {
	var out []plugin.PassRecord
	var errs []error
	led, asked := false, map[meta.BrokerID]bool{}
	read := func(b *Broker) {
		asked[b.ID] = true
		recs, leads, err := f.read(ctx, b.ID, brokerPager(b))
		out = append(out, recs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("broker %d's pass history: %w", b.ID, err))
			return
		}
		led = led || leads
	}
	ids := make([]meta.BrokerID, 0, len(f.leading))
	for id, leads := range f.leading {
		if leads {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if b := c.Broker(id); b != nil && b.Alive() {
			read(b)
		}
	}
	if !led {
		id, err := c.AgreedLeader(ctx, false)
		if b := c.Broker(id); err == nil && b != nil && b.Alive() && !asked[id] {
			read(b)
		} else if err != nil && len(ids) == 0 {
			errs = append(errs, fmt.Errorf("no leader to read the passes of: %w", err))
		}
	}
	slices.SortStableFunc(out, func(a, b plugin.PassRecord) int { return a.Ended.Compare(b.Ended) })
	f.Read += len(out)
	return out, errors.Join(errs...)
}

// read reads broker id's history past the feed's cursor, page by page,
// and returns its passes that ended at or after from and whether the
// broker leads now.
func (f *PassFeed) read(ctx context.Context, id meta.BrokerID, page passPager) ([]plugin.PassRecord, bool, error) {
	cur, known := f.cur[id]
	if !known {
		c, err := f.seek(ctx, id, page)
		if err != nil {
			return nil, false, err
		}
		cur = c
	}
	var out []plugin.PassRecord
	for {
		h, err := page(ctx, cur.last, 0)
		if err != nil {
			return out, false, err
		}
		if !h.Began.Equal(cur.began) {
			// The data directory was replaced: the passes the old
			// history held past the cursor went with it.
			if f.leading[id] {
				f.gap(fmt.Sprintf("broker %d's pass history began anew (%s) after pass %d was read: what it ran later is gone", id, h.Began.Format(time.RFC3339Nano), cur.last))
			}
			delete(f.cur, id)
			if cur, err = f.seek(ctx, id, page); err != nil {
				return out, false, err
			}
			continue
		}
		if h.Dropped > 0 {
			f.Unread += h.Dropped
			f.gap(fmt.Sprintf("broker %d's pass history dropped passes %d to %d before they were read", id, cur.last+1, h.First-1))
			cur.last = h.First - 1
		}
		for _, p := range h.Passes {
			if p.Seq <= cur.last {
				continue
			}
			if p.Seq != cur.last+1 {
				f.Unread += p.Seq - cur.last - 1
				f.gap(fmt.Sprintf("broker %d's pass history skips passes %d to %d", id, cur.last+1, p.Seq-1))
			}
			cur.last = p.Seq
			if !p.Ended.Before(f.from) {
				out = append(out, p)
			}
		}
		f.cur[id] = cur
		if !h.More || len(h.Passes) == 0 {
			f.leading[id] = h.Leader
			if h.Leader && (len(f.Leaders) == 0 || f.Leaders[len(f.Leaders)-1] != id) {
				f.Leaders = append(f.Leaders, id)
			}
			return out, h.Leader, nil
		}
	}
}

// seekBack is how many passes before the newest seek first looks back.
const seekBack = 16

// seek finds where to start reading a history the feed has not read: a
// cursor at or before the last pass that ended before from, found by
// looking back from the newest pass, seekBack passes and four times
// further each time. When every pass the history keeps ended at or after
// from, the passes its bound dropped before them are a gap.
func (f *PassFeed) seek(ctx context.Context, id meta.BrokerID, page passPager) (passCursor, error) {
	h, err := page(ctx, 0, 1)
	if err != nil {
		return passCursor{}, err
	}
	cur := passCursor{began: h.Began}
	if h.Last == 0 {
		return cur, nil
	}
	for back := uint64(seekBack); ; back *= 4 {
		since := h.Last - min(back, h.Last-h.First+1)
		p, err := page(ctx, since, 1)
		if err != nil {
			return passCursor{}, err
		}
		if !p.Began.Equal(h.Began) {
			return passCursor{}, fmt.Errorf("the history began anew while it was read")
		}
		if len(p.Passes) == 0 || p.Passes[0].Ended.Before(f.from) {
			cur.last = since
			return cur, nil
		}
		if since+1 == h.First {
			if since > 0 {
				f.Unread += since
				f.gap(fmt.Sprintf("broker %d's pass history keeps passes %d on, all of them after the watch began: passes 1 to %d were dropped unread", id, h.First, since))
			}
			cur.last = since
			return cur, nil
		}
	}
}

func (f *PassFeed) gap(s string) {
	if !slices.Contains(f.Gaps, s) {
		f.Gaps = append(f.Gaps, s)
	}
}

// problem is "" when every pass the histories numbered was read, else
// what was not.
func (f *PassFeed) Problem() string {
	if len(f.Gaps) == 0 {
		return ""
	}
	return fmt.Sprintf("heal pass history: %d passes unread: %s", f.Unread, strings.Join(f.Gaps, "; "))
}

// summary says how many passes were read, of how many the histories
// numbered, and from which leaders' histories.
func (f *PassFeed) Summary() string {
	s := fmt.Sprintf("heal passes read: %d of %d", f.Read, uint64(f.Read)+f.Unread)
	switch len(f.Leaders) {
	case 0:
	case 1:
		s += fmt.Sprintf(" (leader %d's history)", f.Leaders[0])
	default:
		ls := make([]string, len(f.Leaders))
		for i, id := range f.Leaders {
			ls[i] = fmt.Sprint(id)
		}
		s += fmt.Sprintf(" (the leader changed: histories of brokers %s)", strings.Join(ls, ", then "))
	}
	return s
}

// passCursor is how far a feed read one broker's pass history: the
// history's start (a new one after the data directory was replaced) and
// the last pass read.
type passCursor struct {
	began time.Time
	last  uint64
}

// Until reads the feed's passes in order, calling each on every one, until
// each says done; it returns that pass. It waits for new passes up to
// within, and fails with each's last account when they run out, or at
// once when the histories dropped or skipped a pass (Problem): no pass
// goes unjudged. A history that does not answer is read again.
func (f *PassFeed) Until(ctx context.Context, c *Cluster, within time.Duration, each func(p *plugin.PassRecord) (done bool, why string)) (plugin.PassRecord, error) {
	deadline := time.Now().Add(within)
	why := "no heal pass read"
	var lastErr error
	for {
		recs, err := f.Next(ctx, c)
		if err != nil {
			lastErr = err
		}
		if p := f.Problem(); p != "" {
			return plugin.PassRecord{}, errors.New(p)
		}
		for i := range recs {
			done, w := each(&recs[i])
			if done {
				return recs[i], nil
			}
			why = w
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				why += " (last read error: " + lastErr.Error() + ")"
			}
			return plugin.PassRecord{}, fmt.Errorf("after %v, %s: %s", within, f.Summary(), why)
		}
		select {
		case <-ctx.Done():
			return plugin.PassRecord{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
