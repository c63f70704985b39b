package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ErrClosed: Serve after Close.
var ErrClosed = errors.New("kafka: server closed")

// Server serves the Kafka protocol on listeners, one goroutine per
// connection, answering each connection's requests in order.
type Server struct {
	cfg     Config
	cluster Cluster
	log     zerolog.Logger
	tls     *tls.Config // cfg.TLS with client certificates required, or nil
	parts   partitions
	coord   *coordinator // the groups this broker coordinates
	groups  Groups       // cluster as Groups, nil when it is not one
	// dropProduceAnswer, a test's hook, is asked after each Produce is
	// handled, before its answer is written: true closes the connection
	// unanswered, as a leader killed at that moment would.
	dropProduceAnswer func() bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool                      // protected by mu
	lns    map[net.Listener]struct{} // protected by mu
	conns  map[net.Conn]struct{}     // protected by mu
}

// NewServer returns a server answering for cluster; cfg must validate.
func NewServer(cfg Config, cluster Cluster) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, cluster: cluster, log: cfg.Logger,
		ctx: ctx, cancel: cancel,
		lns: make(map[net.Listener]struct{}), conns: make(map[net.Conn]struct{}),
	}
	s.coord = newCoordinator(cfg.Clock)
	s.groups, _ = cluster.(Groups)
	if cfg.TLS != nil {
		s.tls = s.serverTLS()
	}
	return s, nil
}

// serverTLS is cfg.TLS requiring a client certificate that Authorize
// accepts during the handshake.
func (s *Server) serverTLS() *tls.Config {
	c := s.cfg.TLS.Clone()
	if c.ClientAuth < tls.RequireAnyClientCert {
		c.ClientAuth = tls.RequireAnyClientCert
	}
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		_, err := s.cfg.Authorize(cs)
		return err
	}
	return c
}

// Serve accepts connections on ln until Close (it then returns ErrClosed)
// or an accept error. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln, nil) {
		ln.Close()
		return ErrClosed
	}
	defer s.untrack(ln, nil)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("kafka: accept on %s: %w", ln.Addr(), err)
		}
		if !s.track(nil, nc) {
			nc.Close()
			return ErrClosed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(nil, nc)
			s.serveConn(nc)
		}()
	}
}

// Close stops every listener and connection and waits for their
// goroutines. Appends in flight see their context cancelled.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.cancel()
	for ln := range s.lns {
		ln.Close()
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) track(ln net.Listener, nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if ln != nil {
		s.lns[ln] = struct{}{}
	}
	if nc != nil {
		s.conns[nc] = struct{}{}
	}
	return true
}

func (s *Server) untrack(ln net.Listener, nc net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ln != nil {
		delete(s.lns, ln)
		ln.Close()
	}
	if nc != nil {
		delete(s.conns, nc)
		nc.Close()
	}
}

// conn is one client connection.
type conn struct {
	s    *Server
	nc   net.Conn
	r    *bufio.Reader
	peer peer
	log  zerolog.Logger
	// clientID is the client id of the request being served.
	clientID string
	// arena holds the record batches of the Fetch response being built
	// (AppendReader) and out the encoded response; both are reused once
	// the response is written, and dropped when over maxKeep.
	arena, out []byte
	// records is the count of records of the Produce being served (0 for
	// any other request): serveConn weighs its time by them.
	records int
}

// maxKeep bounds the buffers a connection keeps between requests.
const maxKeep = 16 << 20

// serveConn authenticates nc and answers its requests until it closes or
// sends what cannot be answered.
func (s *Server) serveConn(nc net.Conn) {
	p, nc, err := s.authenticate(nc)
	if err != nil {
		if aborted(err) {
			s.log.Debug().Str("peer", nc.RemoteAddr().String()).Err(err).Msg("kafka: the peer closed its connection during the TLS handshake")
			return
		}
		s.log.Warn().Str("peer", nc.RemoteAddr().String()).Err(err).Msg("kafka: peer not admitted: TLS handshake or authorization failed")
		return
	}
	c := &conn{s: s, nc: nc, r: bufio.NewReader(nc), peer: p,
		log: s.log.With().Str("peer", p.name).Str("addr", p.addr).Logger()}
	for {
		frame, start, err := c.readFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && s.ctx.Err() == nil {
				c.log.Warn().Err(err).Msg("kafka: closing connection")
			}
			return
		}
		out, err := c.serve(frame)
		if err != nil {
			c.log.Warn().Err(err).Msg("kafka: closing connection")
			return
		}
		if c.records > 0 && s.dropProduceAnswer != nil && s.dropProduceAnswer() {
			return
		}
		if out != nil {
			if _, err := nc.Write(out); err != nil {
				c.log.Debug().Err(err).Msg("kafka: writing a response")
				return
			}
		}
		if c.records > 0 {
			end := s.now()
			s.cfg.Latency.ObserveN(end, end.Sub(start), c.records)
			c.records = 0
		}
		c.arena, c.out = keep(c.arena), keep(c.out)
	}
}

// now reads the configured clock (Config.Clock; nil: the system's).
func (s *Server) now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock.Now()
	}
	return time.Now()
}

// aborted says whether err ends a handshake the peer walked away from
// (closed or reset its connection): no refusal of ours.
func aborted(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// authenticate runs the TLS handshake, when configured, and names the peer.
func (s *Server) authenticate(nc net.Conn) (peer, net.Conn, error) {
	addr := nc.RemoteAddr().String()
	if s.tls == nil {
		return peer{name: "insecure " + addr, addr: addr, access: AccessRead | AccessWrite}, nc, nil
	}
	tc := tls.Server(nc, s.tls)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return peer{}, nc, fmt.Errorf("kafka: TLS handshake: %w", err)
	}
	id, err := s.cfg.Authorize(tc.ConnectionState())
	if err != nil {
		return peer{}, nc, fmt.Errorf("kafka: authorize: %w", err)
	}
	return peer{name: id.String(), addr: addr, access: RoleAccess(id.Role)}, tc, nil
}

// readFrame reads one size-prefixed request and says when its size prefix
// had been read (the request's start, as Latency counts it). A size over
// the limit or a connection closed inside a frame is an error naming the
// sizes; a connection closed between frames is io.EOF.
func (c *conn) readFrame() ([]byte, time.Time, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, time.Time{}, fmt.Errorf("kafka: truncated frame: size prefix cut short: %v", err)
		}
		return nil, time.Time{}, err
	}
	start := c.s.now()
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > c.s.cfg.MaxFrameBytes {
		return nil, start, fmt.Errorf("kafka: frame of %d bytes, over the limit of %d (MaxFrameBytes)", n, c.s.cfg.MaxFrameBytes)
	}
	frame := make([]byte, n)
	if got, err := io.ReadFull(c.r, frame); err != nil {
		return nil, start, fmt.Errorf("kafka: truncated frame: %d of %d bytes: %v", got, n, err)
	}
	return frame, start, nil
}

// keep returns b emptied for reuse, or nil when it is over maxKeep.
func keep(b []byte) []byte {
	if cap(b) > maxKeep {
		return nil
	}
	return b[:0]
}
