package catchup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// Sink prepares the local copies a Client receives into. StoreSink adapts
// a *store.DB to it.
type Sink interface {
	// OpenTarget opens the local copy of seg for receiving, creating it if
	// missing, after cutting it back to its durable end (the end of its
	// last whole, valid frame). The copy is held exclusively until Commit
	// or Abort. seg is sealed and valid.
	OpenTarget(seg meta.Segment) (Target, error)
}

// Target is one local copy being received.
type Target interface {
	// Resume returns the bytes of the copy already valid, at a frame
	// boundary: the transfer asks for [Resume, Size).
	Resume() int64
	// Size returns the bytes of the complete sealed copy, frames plus
	// seal footer.
	Size() int64
	// File returns the copy's file, written at [Resume, Size). catchup
	// never closes it.
	File() File
	// Commit verifies the whole copy against the segment (frame CRCs,
	// contiguous offsets, footer, checksum), syncs file and directory,
	// fences it and releases it. When verification fails it leaves the
	// copy at its last valid frame and returns an error wrapping
	// ErrVerify; other errors (I/O) are reported as ErrTarget.
	Commit() error
	// Abort cuts the copy back to its durable end and releases it.
	Abort() error
}

// Failer is an optional capability of a Target, found by type assertion:
// after a write to its file failed, even outside File's methods (splice or
// the write-behind's sync_file_range through the descriptor, which the
// File cannot see), Fetch finishes the target with Fail instead of Abort,
// so that the sink can mark the copy failed (the store latches it) as it
// would for a failed WriteAt. op is "write" or "writeback".
type Failer interface {
	Fail(op string, err error) error
}

// Progress is called as bytes arrive, with done counting the bytes of the
// copy that are in place (the resumed prefix included) out of total. It is
// called from the fetching goroutine, once at the start and after every
// chunk; it must not block for long.
type Progress func(done, total int64)

// Result describes one Fetch.
type Result struct {
	From     int64         // where this run started: the target's durable end
	Received int64         // bytes received by this run
	Size     int64         // bytes of the complete copy
	Took     time.Duration // from the call to its return
	// Wait is the time waiting for a transfer slot (Throttle's
	// concurrency cap), Transfer the time receiving the bytes (dial to
	// the last byte written, the rate cap's pauses included), Commit the
	// Sink's Commit (verification of the whole copy and its sync).
	Wait, Transfer, Commit time.Duration
}

// Client fetches copies from other brokers' Servers into a Sink. Set the
// exported fields before the first Fetch and do not change them. Safe for
// concurrent use.
type Client struct {
	// Insecure lets Fetch send a request without a ticket (a nil
	// ticket), which only a Server with Insecure set serves: for
	// clusters without certificates on loopback only.
	Insecure bool
	// TLS, when set, wraps the data connection in TLS 1.3 and receives
	// with user-space copies (no splice). It must present this broker's
	// certificate and trust the cluster CA; an empty ServerName is taken
	// from the address dialed. The request still carries its ticket.
	TLS *tls.Config
	// Throttle limits this broker's incoming transfers; nil: no limits,
	// DefaultIdleTimeout.
	Throttle *Throttle
	// Mode selects the receive path; ModeDefault is DefaultRecvMode.
	Mode Mode
	// Dial opens the data connection; nil uses a net.Dialer whose timeout
	// is the idle timeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives one event per fetch. The zero Logger discards.
	Logger zerolog.Logger

	stats counters
	// pipeSize is the splice pipe's size; 0 means maxChunk. Set by the
	// pipe-size benchmark only.
	pipeSize int
	// writeback and wbWindow are the write-behind's call and window; nil
	// and 0 mean syncFileRange (none off Linux) and DefaultWriteBehind.
	// Set by tests only.
	writeback writebackFunc
	wbWindow  int64
}

// Stats returns what the client did so far.
func (c *Client) Stats() Stats { return c.stats.snapshot() }

// Fetch brings the local copy of seg up to date from the Server at addr:
// it opens the target through sink (which cuts it back to its durable
// end), asks for exactly the missing bytes [Resume, Size) over one
// connection, presenting ticket, writes them at offset Resume, and commits
// (verifies and syncs). seg must be sealed and valid. ticket is the opaque
// ticket the coordinator issued for this transfer (IssueTicket); nil only
// with Insecure. It admits one request: a Fetch that fails after the
// server accepted it (ErrCut, ErrTarget, ErrVerify) has spent it, and the
// next Fetch needs a new one. progress may be nil.
//
// A fetch cut at any byte (connection closed, idle timeout, ctx) aborts
// the target back to its durable end and returns an error wrapping ErrCut;
// the next Fetch resumes there. Errors: a server refusal (*RemoteError,
// wrapping ErrUnauthenticated, ErrForbidden, ErrBadName, ErrLatched, ... as
// its Code says), ErrUnauthenticated for a nil ticket without Insecure
// (nothing is touched) or a refused TLS handshake, ErrBusy when this end's
// Throttle has no free slot, ErrCut, ErrVerify when the copy arrived but
// failed verification (left at its last valid frame), ErrTarget when the
// local copy could not be prepared or written (the cause is wrapped too,
// e.g. syscall.ENOSPC), ErrMalformed or ErrBadName for a bad seg, which
// changes nothing.
func (c *Client) Fetch(ctx context.Context, addr string, seg meta.Segment, ticket []byte, sink Sink, progress Progress) (res Result, err error) {
	start := time.Now()
	if err := checkSegment(seg); err != nil {
		return res, err
	}
	if len(ticket) == 0 && !c.Insecure {
		return res, fmt.Errorf("%w: segment %s: no ticket (the coordinator issues one per transfer; Client.Insecure fetches without)", ErrUnauthenticated, seg.ID)
	}
	if len(ticket) > MaxTicketLen {
		return res, fmt.Errorf("%w: segment %s: ticket of %d bytes, at most %d", ErrMalformed, seg.ID, len(ticket), MaxTicketLen)
	}
	release, err := c.Throttle.acquireFetch(ctx)
	res.Wait = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("catchup: segment %s from %s: %w", seg.ID, addr, err)
	}
	defer release()
	c.Throttle.atPriority(func() { res, err = c.fetchHeld(ctx, addr, seg, ticket, sink, progress, start, res) })
	return res, err
}

// fetchHeld is Fetch once its slot is held: open the target, receive,
// commit (at the Throttle's priority: Limits.Background).
func (c *Client) fetchHeld(ctx context.Context, addr string, seg meta.Segment, ticket []byte, sink Sink, progress Progress, start time.Time, res Result) (_ Result, err error) {
	log := c.Logger.With().Str("segment", string(seg.ID)).Str("source", addr).Logger()
	t, err := sink.OpenTarget(seg)
	if err != nil {
		return res, fmt.Errorf("%w: segment %s: opening the target copy: %w", ErrTarget, seg.ID, err)
	}
	res.From, res.Size = t.Resume(), t.Size()
	committed := false
	defer func() {
		res.Took = time.Since(start)
		if !committed {
			var te *targetError
			if f, ok := t.(Failer); ok && errors.As(err, &te) {
				if ferr := f.Fail(te.op, te.err); ferr != nil {
					err = errors.Join(err, fmt.Errorf("%w: segment %s: %w", ErrTarget, seg.ID, ferr))
				}
			} else if aerr := t.Abort(); aerr != nil {
				err = errors.Join(err, fmt.Errorf("%w: segment %s: abort: %w", ErrTarget, seg.ID, aerr))
			}
		}
		if err != nil {
			log.Warn().Err(err).Int64("from", res.From).Int64("received", res.Received).Msg("catchup: fetch failed")
		} else {
			log.Debug().Int64("from", res.From).Int64("received", res.Received).Float64("took_seconds", res.Took.Seconds()).Msg("catchup: fetched")
		}
	}()
	if res.From < 0 || res.From > res.Size {
		return res, fmt.Errorf("%w: segment %s: target resumes at byte %d, outside the copy's %d bytes", ErrTarget, seg.ID, res.From, res.Size)
	}
	if progress != nil {
		progress(res.From, res.Size)
	}
	if res.From < res.Size {
		t0 := time.Now()
		res.Received, err = c.receive(ctx, addr, &request{seg: seg, from: res.From, to: res.Size, ticket: ticket}, t, progress)
		res.Transfer = time.Since(t0)
		if err != nil {
			if res.Received > 0 || res.From > 0 {
				c.stats.failed.Add(1)
			}
			return res, err
		}
	}
	committed = true
	t0 := time.Now()
	err = t.Commit()
	res.Commit = time.Since(t0)
	if err != nil {
		c.stats.failed.Add(1)
		if errors.Is(err, ErrVerify) {
			return res, fmt.Errorf("catchup: segment %s from %s: %w", seg.ID, addr, err)
		}
		return res, fmt.Errorf("%w: segment %s: commit: %w", ErrTarget, seg.ID, err)
	}
	c.stats.transfers.Add(1)
	return res, nil
}

// checkSegment refuses a segment a Fetch cannot be for.
func checkSegment(seg meta.Segment) error {
	if err := seg.ID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadName, err)
	}
	if err := seg.Validate(); err != nil {
		return fmt.Errorf("%w: segment %s: %w", ErrMalformed, seg.ID, err)
	}
	if !seg.Sealed {
		return fmt.Errorf("%w: segment %s is not sealed: only sealed copies are fetched", ErrMalformed, seg.ID)
	}
	return nil
}

// receive sends req to addr and writes the answer's bytes into t's file.
func (c *Client) receive(ctx context.Context, addr string, req *request, t Target, progress Progress) (int64, error) {
	seg, from, to := req.seg, req.from, req.to
	conn, err := c.open(ctx, addr, req)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var onChunk func(int64)
	if progress != nil {
		onChunk = func(done int64) { progress(from+done, to) }
	}
	n := to - from
	mode := c.Mode.resolve(DefaultRecvMode)
	if c.TLS != nil {
		mode = ModeReadWrite
	}
	wbf := c.writeback
	if wbf == nil {
		wbf = syncFileRange
	}
	f := t.File()
	wb := newWriteBehind(f, from, c.wbWindow, wbf, &c.stats.writeback)
	got, err := recvRange(ctx, conn, f, from, n, mode, c.Throttle, &c.stats, onChunk, c.pipeSize, wb)
	c.stats.bytes.Add(uint64(got))
	if err != nil {
		var te *targetError
		if errors.As(err, &te) {
			return got, fmt.Errorf("%w: segment %s: %d of %d bytes written from byte %d: %w", ErrTarget, seg.ID, got, n, from, te)
		}
		return got, fmt.Errorf("%w: segment %s from %s: %d of %d bytes received from byte %d: %w", ErrCut, seg.ID, addr, got, n, from, err)
	}
	return got, nil
}

// open dials addr (and shakes hands over TLS with c.TLS), sends req and
// reads the answer. On success the connection is positioned at the first
// data byte.
func (c *Client) open(ctx context.Context, addr string, req *request) (net.Conn, error) {
	seg, idle := req.seg, c.Throttle.idle()
	dial := c.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: idle}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: segment %s: dial %s: %w", ErrCut, seg.ID, addr, err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn.SetDeadline(time.Now().Add(idle))
	if c.TLS != nil {
		tc := tls.Client(conn, c.tlsConfig(addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, c.tlsErr(ctx, seg, addr, "TLS handshake", err)
		}
		conn = tc
	}
	var b [maxRequest]byte
	if _, err := conn.Write(appendRequest(b[:0], req)); err != nil {
		return nil, c.tlsErr(ctx, seg, addr, "sending the request", err)
	}
	resp, err := readResponse(conn)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrVersion) {
			return nil, fmt.Errorf("segment %s from %s: %w", seg.ID, addr, err)
		}
		return nil, c.tlsErr(ctx, seg, addr, "reading the answer", err)
	}
	if resp.code != CodeOK {
		return nil, fmt.Errorf("segment %s: %w", seg.ID, &RemoteError{Addr: addr, Code: resp.code, Message: resp.msg})
	}
	if resp.count != req.to-req.from {
		return nil, fmt.Errorf("%w: segment %s from %s: server announces %d bytes for [%d, %d)", ErrMalformed, seg.ID, addr, resp.count, req.from, req.to)
	}
	ok = true
	return conn, nil
}

// tlsConfig is c.TLS for a connection to addr: TLS 1.3 at least, and the
// server name taken from addr when c.TLS names none.
func (c *Client) tlsConfig(addr string) *tls.Config {
	cfg := c.TLS.Clone()
	cfg.MinVersion = tls.VersionTLS13
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}

// tlsErr classifies an error of the connection: the TLS layer refusing a
// certificate, at either end, is ErrUnauthenticated; a server that does
// not speak TLS is ErrMalformed; anything else cuts the transfer
// (cutErr).
func (c *Client) tlsErr(ctx context.Context, seg meta.Segment, addr, what string, err error) error {
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var oe *net.OpError
	switch {
	case c.TLS == nil:
	case errors.As(err, &cve):
		return fmt.Errorf("%w: segment %s: %s with %s: the server's certificate: %w", ErrUnauthenticated, seg.ID, what, addr, err)
	case errors.As(err, &oe) && oe.Op == "remote error":
		return fmt.Errorf("%w: segment %s: %s with %s: the server refused this broker's certificate: %w", ErrUnauthenticated, seg.ID, what, addr, err)
	case errors.As(err, &rhe):
		return fmt.Errorf("%w: segment %s: %s with %s: the server does not speak TLS (is its Server.TLS set?): %w", ErrMalformed, seg.ID, what, addr, err)
	}
	return c.cutErr(ctx, seg, addr, what, err)
}

func (c *Client) cutErr(ctx context.Context, seg meta.Segment, addr, what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return fmt.Errorf("%w: segment %s from %s: %s: %w", ErrCut, seg.ID, addr, what, err)
}
