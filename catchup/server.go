package catchup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/ratelog"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// Source opens sealed copies for a Server to send. StoreSource adapts a
// *store.DB to it.
type Source interface {
	// OpenSource opens the sealed copy of seg.ID for reading and returns
	// it with its size in bytes, frames plus seal footer: a request may
	// ask for any range within [0, size). seg is what the requesting
	// target expects (StartOffset, Length, ByteSize, Checksum; Sealed is
	// true); a copy that disagrees is refused. The error wraps
	// ErrUnknownSegment (no copy), ErrUnsealed (not sealed), ErrLatched
	// (latched failed) or ErrMismatch (sealed differently, or short) for
	// those refusals; any other error is answered as ErrInternal. seg.ID
	// has passed meta.SegmentID.Validate. The caller closes the File.
	OpenSource(seg meta.Segment) (f File, size int64, err error)
}

// Server answers catch-up requests on a dedicated data listener: it
// checks each request's ticket, then the request, and sends the requested
// range of the sealed copy. Set the exported fields, then call Serve; do
// not change them afterwards. Safe for concurrent use.
type Server struct {
	// Source opens the copies to send. Required.
	Source Source
	// Self is this (the source) broker: a ticket must name it as its
	// source. Required with Tickets.
	Self meta.BrokerID
	// Tickets verifies the tickets' signatures. Required unless Insecure.
	Tickets TicketVerifier
	// Insecure serves requests that carry no ticket: anyone who reaches
	// the listener may read any sealed copy. For clusters without
	// certificates on loopback only. With Tickets set too, a request
	// that does carry a ticket still has it checked; without, tickets are
	// ignored.
	Insecure bool
	// TLS, when set, wraps every connection in TLS 1.3 and sends with
	// user-space copies (no sendfile): for networks that need
	// confidentiality. It must verify the client's certificate (ClientAuth
	// tls.RequireAndVerifyClientCert, or a VerifyConnection that checks
	// it). Requests still need a ticket.
	TLS *tls.Config
	// Throttle limits this broker's outgoing transfers; nil: no limits,
	// DefaultIdleTimeout.
	Throttle *Throttle
	// Mode selects the send path; ModeDefault is DefaultSendMode. With TLS
	// it is always ModeReadWrite.
	Mode Mode
	// Logger receives one event per failed transfer (Warn), per refused
	// request or handshake (Warn, at most one per remote IP per
	// ratelog.DefaultInterval, with the count of those not logged), and
	// per completed one (Debug). The zero Logger discards.
	Logger zerolog.Logger
	// Now is the clock for ticket expiries; nil means time.Now.
	Now func() time.Time

	tlsConfig *tls.Config // TLS raised to TLS 1.3: set under mu by the first Serve, before any connection
	refusals  ratelog.Limiter
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	// tickets holds the nonce of every ticket in use or spent, until the
	// ticket expires. INVARIANT: at most maxTickets entries, each
	// expiring at most MaxTicketLife after it was added. Protected by mu.
	tickets map[[16]byte]ticketUse
	wg      sync.WaitGroup
	stats   counters
}

// ticketUse is what a Server remembers of a ticket it admitted.
type ticketUse struct {
	expires time.Time
	spent   bool // a transfer started with it; else a request holds it
}

// maxTickets bounds the tickets a Server remembers: at most this many
// transfers per MaxTicketLife.
const maxTickets = 1 << 16

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Stats returns what the server did so far.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// Serve accepts connections on l and serves each in its own goroutine
// until l fails or Close is called. It returns ErrServerClosed after Close,
// a configuration error (naming the field) at once when Source is missing,
// Tickets is missing without Insecure, Self is missing with Tickets, or TLS
// does not verify clients, or l's Accept error. Serve closes l.
func (s *Server) Serve(l net.Listener) error {
	defer l.Close()
	if err := s.validate(); err != nil {
		return err
	}
	if s.Insecure {
		s.Logger.Warn().Bool("tickets", s.Tickets != nil).Msg("catchup: insecure: requests without a ticket are served")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]struct{})
	}
	if s.TLS != nil && s.tlsConfig == nil {
		s.tlsConfig = s.TLS.Clone()
		s.tlsConfig.MinVersion = tls.VersionTLS13
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	bo := retry.Backoff{Initial: 5 * time.Millisecond, Max: time.Second}
	for {
		conn, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				wait := bo.Next()
				s.Logger.Warn().Err(err).Float64("retry_in_seconds", wait.Seconds()).Msg("catchup: accept")
				// Not bounded by a context: Close closes l, and the
				// Accept after the wait returns.
				_ = bo.Sleep(context.Background(), wait)
				continue
			}
			return err
		}
		bo.Reset()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return ErrServerClosed
		}
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(conn)
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		}()
	}
}

// Close stops every Serve, cuts every transfer in flight and waits for
// their goroutines to return. Targets of cut transfers resume later.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// validate checks the configuration; the error names the field.
func (s *Server) validate() error {
	switch {
	case s.Source == nil:
		return errors.New("catchup: Server.Source is nil")
	case s.Tickets == nil && !s.Insecure:
		return errors.New("catchup: Server.Tickets is nil: set a TicketVerifier, or Server.Insecure to serve requests without tickets")
	case s.Tickets != nil && s.Self == 0:
		return errors.New("catchup: Server.Self is 0: set this broker's id (a ticket names its source broker)")
	}
	if c := s.TLS; c != nil {
		if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
			return errors.New("catchup: Server.TLS has no certificate (Certificates or GetCertificate)")
		}
		if c.ClientAuth != tls.RequireAndVerifyClientCert && c.VerifyConnection == nil && c.GetConfigForClient == nil {
			return fmt.Errorf("catchup: Server.TLS does not verify client certificates (ClientAuth %v): set tls.RequireAndVerifyClientCert or a VerifyConnection", c.ClientAuth)
		}
	}
	return nil
}

// handle serves one connection: one request, one answer.
func (s *Server) handle(conn net.Conn) {
	defer conn.Close()
	peer := conn.RemoteAddr().String()
	log := s.Logger.With().Str("peer", peer).Logger()
	if err := conn.SetDeadline(time.Now().Add(s.Throttle.idle())); err != nil {
		return
	}
	mode := s.Mode.resolve(DefaultSendMode)
	if s.tlsConfig != nil {
		tc, ok := s.handshake(conn, peer)
		if !ok {
			return
		}
		conn, mode = tc, ModeReadWrite
	}
	req, err := readRequest(conn)
	var de *decodeError
	if err != nil && !errors.As(err, &de) {
		log.Debug().Err(err).Msg("catchup: reading request")
		return
	}
	var tk *signedTicket
	if de == nil {
		tk, de = s.authorize(req)
	}
	if de != nil {
		var seg meta.SegmentID
		if tk != nil { // verified: its segment may be logged
			seg = req.seg.ID
		}
		s.refused(peer, de.code, de.msg, seg, tk)
		s.answerRefusal(conn, response{code: de.code, msg: de.msg})
		return
	}
	s.serve(conn, req, tk, mode, log)
}

// handshake runs the server's TLS handshake on conn. A client that does
// not speak TLS is answered in plain text; a failed handshake is a
// refusal.
func (s *Server) handshake(conn net.Conn, peer string) (*tls.Conn, bool) {
	tc := tls.Server(conn, s.tlsConfig)
	err := tc.Handshake()
	if err == nil {
		return tc, true
	}
	var rhe tls.RecordHeaderError
	if errors.As(err, &rhe) && rhe.Conn != nil {
		msg := "this data listener speaks TLS: set Client.TLS"
		s.refused(peer, CodeUnauthenticated, msg, "", nil)
		s.answerRefusal(rhe.Conn, response{code: CodeUnauthenticated, msg: msg})
		return nil, false
	}
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.As(err, &ne) && ne.Timeout() {
		s.Logger.Debug().Str("peer", peer).Err(err).Msg("catchup: TLS handshake")
		return nil, false
	}
	s.refused(peer, CodeUnauthenticated, "TLS handshake: "+err.Error(), "", nil)
	// The alert is sent: let the client read it before the close resets
	// the connection over its unread request.
	drain(conn)
	return nil, false
}

// authorize checks req's ticket: signature and issuer (CodeUnauthenticated),
// then what it grants (CodeForbidden), and reserves its nonce. A request
// without a ticket passes only on an Insecure server; with Insecure and no
// Tickets, tickets are not checked. It changes nothing when it refuses.
func (s *Server) authorize(req *request) (*signedTicket, *decodeError) {
	if len(req.ticket) == 0 {
		if s.Insecure {
			return nil, nil
		}
		return nil, refuse(CodeUnauthenticated, "no ticket: this source serves only requests with a ticket from the coordinator")
	}
	if s.Tickets == nil {
		return nil, nil
	}
	tk, de := decodeTicket(req.ticket)
	if de != nil {
		return nil, de
	}
	issuer, err := s.Tickets.VerifyTicket(tk.payload, tk.sig, tk.cert)
	if err != nil {
		return nil, refuse(CodeUnauthenticated, "ticket signature: %v", err)
	}
	if issuer == 0 || issuer != tk.Issuer {
		return nil, refuse(CodeUnauthenticated, "ticket names issuer broker %d, its certificate names broker %d", tk.Issuer, issuer)
	}
	now := s.now()
	if de := tk.grants(req, s.Self, now); de != nil {
		return tk, de
	}
	return tk, s.reserve(tk, now)
}

// reserve records tk's nonce as in use: refused when it was used before
// or is in use, and CodeBusy when maxTickets unexpired tickets are held.
func (s *Server) reserve(tk *signedTicket, now time.Time) *decodeError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tickets == nil {
		s.tickets = make(map[[16]byte]ticketUse)
	}
	if u, ok := s.tickets[tk.Nonce]; ok {
		if u.spent {
			return refuse(CodeForbidden, "segment %s: ticket already used (a ticket admits one transfer; ask the coordinator for a new one)", tk.Segment.ID)
		}
		return refuse(CodeForbidden, "segment %s: ticket in use by another request", tk.Segment.ID)
	}
	if len(s.tickets) >= maxTickets/2 {
		for k, u := range s.tickets {
			if !now.Before(u.expires) {
				delete(s.tickets, k)
			}
		}
	}
	if len(s.tickets) >= maxTickets {
		return refuse(CodeBusy, "%d unexpired tickets held: the replay set is full", len(s.tickets))
	}
	s.tickets[tk.Nonce] = ticketUse{expires: tk.Expires}
	return nil
}

// settle ends a reservation: spent keeps the nonce until the ticket
// expires (a transfer started with it), otherwise it is forgotten (the
// request was refused before any byte was sent). A nil tk does nothing.
func (s *Server) settle(tk *signedTicket, spent bool) {
	if tk == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if spent {
		s.tickets[tk.Nonce] = ticketUse{expires: tk.Expires, spent: true}
	} else {
		delete(s.tickets, tk.Nonce)
	}
}

// refused counts a refusal and logs it, at most once per remote IP per
// ratelog.DefaultInterval. segment is logged only when known to be
// authorized (seg != ""); tk, when given, names the ticket's brokers.
func (s *Server) refused(peer string, c Code, msg string, seg meta.SegmentID, tk *signedTicket) {
	s.stats.refused.Add(1)
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		host = peer
	}
	ok, suppressed := s.refusals.Allow(host, s.now())
	if !ok {
		return
	}
	ev := s.Logger.Warn().Str("peer", peer).Str("code", c.String()).Str("reason", msg).Int("suppressed", suppressed)
	if seg != "" {
		ev = ev.Str("segment", string(seg))
	}
	if tk != nil {
		ev = ev.Uint32("issuer", uint32(tk.Issuer)).Uint32("target", uint32(tk.Target))
	}
	ev.Msg("catchup: request refused")
}

// serve sends the range req asks for, once its ticket (tk, nil on an
// Insecure server) is reserved: the ticket is spent before the CodeOK
// answer goes out, and released before a refusal is answered.
func (s *Server) serve(conn net.Conn, req *request, tk *signedTicket, mode Mode, log zerolog.Logger) {
	log = log.With().Str("segment", string(req.seg.ID)).Int64("from", req.from).Int64("to", req.to).Logger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refuseErr := func(err error) {
		c := codeOf(err)
		s.settle(tk, false)
		s.refused(conn.RemoteAddr().String(), c, err.Error(), req.seg.ID, tk)
		s.answerRefusal(conn, response{code: c, msg: err.Error()})
	}
	release, err := s.Throttle.acquireServe(ctx)
	if err != nil {
		refuseErr(err)
		return
	}
	defer release()
	f, size, err := s.Source.OpenSource(req.seg)
	if err != nil {
		refuseErr(fmt.Errorf("segment %s: %w", req.seg.ID, err))
		return
	}
	defer f.Close()
	if req.to > size {
		refuseErr(fmt.Errorf("%w: segment %s: range [%d, %d) runs past the end of the sealed copy at %d", ErrOutOfRange, req.seg.ID, req.from, req.to, size))
		return
	}
	n := req.to - req.from
	s.settle(tk, true)
	if !s.answer(conn, response{code: CodeOK, count: n}) {
		return
	}
	start := time.Now()
	var sent int64
	s.Throttle.atPriority(func() { sent, err = sendRange(ctx, conn, f, req.from, n, mode, s.Throttle, &s.stats, nil) })
	s.stats.bytes.Add(uint64(sent))
	if err != nil {
		s.stats.failed.Add(1)
		log.Warn().Err(err).Int64("sent", sent).Msg("catchup: transfer cut")
		return
	}
	s.stats.transfers.Add(1)
	// Half-close and wait for the client to close its end, so that no
	// reset can overtake the last bytes.
	if tc, ok := conn.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
		conn.SetReadDeadline(time.Now().Add(s.Throttle.idle()))
		io.Copy(io.Discard, io.LimitReader(conn, 1))
	}
	log.Debug().Int64("bytes", sent).Float64("took_seconds", time.Since(start).Seconds()).Msg("catchup: sent")
}

// answerRefusal answers a refusal, then half-closes and reads what the client
// still sends (at most maxRequest bytes, within the connection's
// deadline), so that closing with unread bytes does not reset the
// connection before the answer is read.
func (s *Server) answerRefusal(conn net.Conn, r response) {
	if s.answer(conn, r) {
		drain(conn)
	}
}

// drain half-closes conn and reads what the peer still sends, at most
// maxRequest bytes within the connection's deadline.
func drain(conn net.Conn) {
	if tc, ok := conn.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
		io.Copy(io.Discard, io.LimitReader(conn, maxRequest))
	}
}

func (s *Server) answer(conn net.Conn, r response) bool {
	var b [respFixedSize + maxMessage]byte
	_, err := conn.Write(appendResponse(b[:0], r))
	return err == nil
}
