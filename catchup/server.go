package catchup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

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

// DefaultMaxSkew is how far a request's timestamp may be from the server's
// clock when Server.MaxSkew is 0.
const DefaultMaxSkew = time.Minute

// Server answers catch-up requests on a dedicated data listener: it
// authenticates each request, checks it, and sends the requested range of
// the sealed copy. Set the exported fields, then call Serve; do not change
// them afterwards. Safe for concurrent use.
type Server struct {
	// Source opens the copies to send. Required.
	Source Source
	// Secret is the cluster secret; at least MinSecretLen bytes. Required.
	Secret []byte
	// Throttle limits this broker's outgoing transfers; nil: no limits,
	// DefaultIdleTimeout.
	Throttle *Throttle
	// Mode selects the send path; ModeDefault is DefaultSendMode.
	Mode Mode
	// MaxSkew bounds the request timestamp's distance from Now; 0 means
	// DefaultMaxSkew. Nonces are remembered for that long, so a replayed
	// request is refused.
	MaxSkew time.Duration
	// Logger receives one event per refused or failed transfer (Warn) and
	// per completed one (Debug). The zero Logger discards.
	Logger zerolog.Logger
	// Now is the clock for request timestamps; nil means time.Now.
	Now func() time.Time

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	nonces    map[[16]byte]time.Time
	wg        sync.WaitGroup
	stats     counters
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) maxSkew() time.Duration {
	if s.MaxSkew > 0 {
		return s.MaxSkew
	}
	return DefaultMaxSkew
}

// Stats returns what the server did so far.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// Serve accepts connections on l and serves each in its own goroutine
// until l fails or Close is called. It returns ErrServerClosed after Close,
// a configuration error at once when Source or Secret is missing, or l's
// Accept error. Serve closes l.
func (s *Server) Serve(l net.Listener) error {
	defer l.Close()
	if s.Source == nil {
		return errors.New("catchup: Server.Source is nil")
	}
	if len(s.Secret) < MinSecretLen {
		return fmt.Errorf("catchup: Server.Secret has %d bytes, want at least %d", len(s.Secret), MinSecretLen)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]struct{})
		s.nonces = make(map[[16]byte]time.Time)
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
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
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.Logger.Warn().Err(err).Dur("retry_in", backoff).Msg("catchup: accept")
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
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

// handle serves one connection: one request, one answer.
func (s *Server) handle(conn net.Conn) {
	defer conn.Close()
	log := s.Logger.With().Str("peer", conn.RemoteAddr().String()).Logger()
	if err := conn.SetDeadline(time.Now().Add(s.Throttle.idle())); err != nil {
		return
	}
	req, err := readRequest(conn, s.Secret)
	var de *decodeError
	if err != nil && !errors.As(err, &de) {
		log.Debug().Err(err).Msg("catchup: reading request")
		return
	}
	if de == nil {
		de = s.admit(req)
	}
	if de != nil {
		ev := log.Warn().Str("code", de.code.String()).Str("reason", de.msg)
		if req != nil && de.code != CodeUnauthenticated {
			ev = ev.Str("segment", string(req.seg.ID))
		}
		ev.Msg("catchup: request refused")
		s.answer(conn, response{code: de.code, msg: de.msg})
		return
	}
	log = log.With().Str("segment", string(req.seg.ID)).Int64("from", req.from).Int64("to", req.to).Logger()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refuseErr := func(err error) {
		c := codeOf(err)
		log.Warn().Str("code", c.String()).Err(err).Msg("catchup: request refused")
		s.answer(conn, response{code: c, msg: err.Error()})
	}
	release, err := s.Throttle.acquire(ctx)
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
	if !s.answer(conn, response{code: CodeOK, count: n}) {
		return
	}
	start := time.Now()
	sent, err := sendRange(ctx, conn, f, req.from, n, s.Mode.resolve(DefaultSendMode), s.Throttle, &s.stats, nil)
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
	log.Debug().Int64("bytes", sent).Dur("took", time.Since(start)).Msg("catchup: sent")
}

// admit checks the request's timestamp and nonce.
func (s *Server) admit(req *request) *decodeError {
	now, skew := s.now(), s.maxSkew()
	d := now.Sub(req.time)
	if d > skew || d < -skew {
		return refuse(CodeUnauthenticated, "request timestamp %s is %v from the server's clock, more than %v", req.time.UTC().Format(time.RFC3339Nano), d, skew)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nonces == nil {
		s.nonces = make(map[[16]byte]time.Time)
	}
	if _, seen := s.nonces[req.nonce]; seen {
		return refuse(CodeUnauthenticated, "request replayed (nonce seen before)")
	}
	if len(s.nonces) >= maxNonces/2 {
		for k, exp := range s.nonces {
			if now.After(exp) {
				delete(s.nonces, k)
			}
		}
	}
	if len(s.nonces) >= maxNonces {
		return refuse(CodeBusy, "%d requests in %v: replay cache full", len(s.nonces), skew)
	}
	s.nonces[req.nonce] = req.time.Add(skew)
	return nil
}

// maxNonces bounds the replay cache.
const maxNonces = 1 << 16

func (s *Server) answer(conn net.Conn, r response) bool {
	var b [respFixedSize + maxMessage]byte
	_, err := conn.Write(appendResponse(b[:0], r))
	return err == nil
}
