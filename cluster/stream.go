package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/pki"
)

// Limits of the TLS listener.
const (
	// handshakeTimeout bounds one incoming TLS handshake.
	handshakeTimeout = 5 * time.Second
	// maxHandshakes bounds the incoming handshakes in flight: beyond it a
	// new connection is closed at once, so a flood of idle sockets costs
	// at most this many goroutines.
	maxHandshakes = 128
)

// tlsStream is raft's StreamLayer over mutual TLS 1.3. It runs its own
// accept loop: each TCP connection is handshaken in its own goroutine,
// with a deadline, and the peer's certificate verified (cluster CA, role
// broker); only then is the connection handed to Accept, wrapped in a
// peerConn that lets raft read only RPCs the gate admits. A refused
// connection is closed and logged by the gate (once per remote IP per
// minute); raft never hears of it. Accept returns an error only once the
// stream is closed (raft logs every Accept error).
//
// Dial presents this broker's certificate and accepts a server whose
// certificate chains to the CA, is valid for the dialed host, and names
// the broker the raft configuration gives the dialed address to.
type tlsStream struct {
	ln    net.Listener
	adv   advAddr
	certs *pki.Certs
	srv   *tls.Config
	gate  *gate

	conns chan net.Conn // authenticated connections for Accept; unbuffered
	slots chan struct{} // one per handshake in flight

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and the handshakes

	mu   sync.Mutex
	live map[*peerConn]struct{} // handed to raft, not yet closed; protected by mu

	closeOnce sync.Once
	closeErr  error
}

var _ raft.StreamLayer = (*tlsStream)(nil)

// advAddr is the advertised address as configured (raft reports it as
// the leader's address and sends it in every RPC header, where the gate
// compares it with the configuration's).
type advAddr string

func (a advAddr) Network() string { return "tcp" }
func (a advAddr) String() string  { return string(a) }

// newTLSStream listens on addr and starts the accept loop.
func newTLSStream(addr string, certs *pki.Certs, g *gate) (*tlsStream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &tlsStream{
		ln: ln, adv: advAddr(addr), certs: certs, srv: certs.ServerConfig(), gate: g,
		conns: make(chan net.Conn),
		slots: make(chan struct{}, maxHandshakes),
		live:  map[*peerConn]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Accept implements net.Listener: the next authenticated connection, or
// net.ErrClosed once the stream is closed (and only then).
func (s *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Addr implements net.Listener: the configured address.
func (s *tlsStream) Addr() net.Addr { return s.adv }

// Close implements net.Listener: it stops the listener, interrupts the
// handshakes in flight, ends the reads of the connections handed to raft
// (raft's handler then sees io.EOF at the next RPC and closes them; a
// response being written still goes out), and returns once its own
// goroutines have ended. It is idempotent.
func (s *tlsStream) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = fmt.Errorf("cluster: close raft listener: %w", err)
		}
		s.wg.Wait()
		s.mu.Lock()
		live := s.live
		s.live = nil
		s.mu.Unlock()
		for c := range live {
			_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
		}
	})
	return s.closeErr
}

// acceptLoop accepts TCP connections and starts a handshake for each,
// while a slot is free.
func (s *tlsStream) acceptLoop() {
	defer s.wg.Done()
	bo := retry.Backoff{Initial: 5 * time.Millisecond, Max: time.Second}
	for {
		raw, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of file descriptors): back off.
			s.gate.refuse(s.adv, "", fmt.Errorf("accept: %w", err))
			if bo.Wait(s.ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
		select {
		case s.slots <- struct{}{}:
		default:
			s.gate.refuse(raw.RemoteAddr(), "", fmt.Errorf("%d TLS handshakes already in flight", maxHandshakes))
			raw.Close()
			continue
		}
		s.wg.Add(1)
		go s.admit(raw)
	}
}

// admit handshakes raw and hands it to Accept, or closes it.
func (s *tlsStream) admit(raw net.Conn) {
	defer s.wg.Done()
	tc, id, err := s.handshake(raw)
	<-s.slots
	if err != nil {
		if s.ctx.Err() == nil {
			s.gate.refuse(raw.RemoteAddr(), "", err)
		}
		raw.Close()
		return
	}
	c := newPeerConn(tc, id.Broker, s.gate, s.forget)
	s.mu.Lock()
	s.live[c] = struct{}{} // Close reads live only after wg.Wait
	s.mu.Unlock()
	select {
	case s.conns <- c:
	case <-s.ctx.Done():
		c.Close()
	}
}

// handshake runs the server side of the TLS handshake on raw and verifies
// that the client presented a broker certificate of the cluster CA.
func (s *tlsStream) handshake(raw net.Conn) (*tls.Conn, pki.Identity, error) {
	tc := tls.Server(raw, s.srv)
	ctx, cancel := context.WithTimeout(s.ctx, handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, pki.Identity{}, fmt.Errorf("TLS handshake: %w", err)
	}
	id, err := s.certs.VerifyPeer(tc.ConnectionState().PeerCertificates)
	if err != nil {
		return nil, id, err
	}
	if id.Role != pki.RoleBroker {
		return nil, id, fmt.Errorf("the client certificate names %s, not a broker: only brokers speak raft", id)
	}
	return tc, id, nil
}

// forget drops c from the live set when raft closes it.
func (s *tlsStream) forget(c *peerConn) {
	s.mu.Lock()
	delete(s.live, c)
	s.mu.Unlock()
}

// Dial implements raft.StreamLayer: a TLS connection to address that
// presents this broker's certificate, after checking the server's (see
// tlsStream). Errors name the address and why.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	addr := string(address)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft dial %q: %w", addr, err)
	}
	want, known := s.gate.memberAt(addr)
	cfg := s.certs.ClientConfig()
	cfg.ServerName = host
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := s.certs.VerifyServer(cs)
		if err != nil {
			return err
		}
		if known && id.Broker != want {
			return fmt.Errorf("the server's certificate names %s, but the raft configuration gives %s to broker %d", id, addr, want)
		}
		return nil
	}
	ctx := s.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft dial %s: %w", addr, err)
	}
	return c, nil
}
