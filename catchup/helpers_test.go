package catchup

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// The brokers of the unit tests: the coordinator issues the tickets, the
// source serves, the target fetches.
const (
	testIssuer meta.BrokerID = 1
	testSource meta.BrokerID = 2
	testTarget meta.BrokerID = 3
)

// fakeKey is a test-only TicketSigner: an ed25519 key whose "certificate"
// is the broker id it names (4 bytes, little-endian) and the public key.
type fakeKey struct {
	id   meta.BrokerID
	priv ed25519.PrivateKey
}

func newFakeKey(id meta.BrokerID, seed byte) fakeKey {
	return fakeKey{id: id, priv: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))}
}

func (k fakeKey) cert() []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(k.id)), k.priv.Public().(ed25519.PublicKey)...)
}

func (k fakeKey) SignTicket(payload []byte) ([]byte, []byte, error) {
	return ed25519.Sign(k.priv, payload), k.cert(), nil
}

// fakeCA is a test-only TicketVerifier: the one certificate it issued is
// the only one it accepts (so the broker id it names is bound to its key).
type fakeCA struct{ issued []byte }

func (ca fakeCA) VerifyTicket(payload, sig, cert []byte) (meta.BrokerID, error) {
	if !bytes.Equal(cert, ca.issued) {
		return 0, errors.New("certificate not issued by the cluster CA")
	}
	if !ed25519.Verify(ed25519.PublicKey(cert[4:]), payload, sig) {
		return 0, errors.New("signature does not match the certificate's key")
	}
	return meta.BrokerID(binary.LittleEndian.Uint32(cert)), nil
}

var (
	testKey = newFakeKey(testIssuer, 1)
	testCA  = fakeCA{issued: testKey.cert()}
)

// testTicket is the ticket of testKey for seg's whole copy [0, size),
// from testSource to testTarget, expiring in a minute.
func testTicket(seg meta.Segment, size int64) Ticket {
	return Ticket{Segment: seg, From: 0, To: size, Source: testSource, Target: testTarget, Issuer: testIssuer,
		Expires: time.Now().Add(time.Minute)}
}

// issue signs tk with testKey after edit (which may be nil).
func issue(t testing.TB, tk Ticket, edit func(*Ticket)) []byte {
	t.Helper()
	if edit != nil {
		edit(&tk)
	}
	b, err := IssueTicket(testKey, tk)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fileSource serves plain files by segment id; a unit-test Source for the
// protocol layer (the store-backed tests use StoreSource).
type fileSource struct {
	dir   string
	errs  map[meta.SegmentID]error
	opens atomic.Int32
}

func (s *fileSource) OpenSource(seg meta.Segment) (File, int64, error) {
	s.opens.Add(1)
	if err := s.errs[seg.ID]; err != nil {
		return nil, 0, err
	}
	f, err := os.Open(filepath.Join(s.dir, string(seg.ID)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: %v", ErrUnknownSegment, err)
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// fileSink receives into plain files and commits by comparing with the
// expected bytes.
type fileSink struct {
	dir  string
	want map[meta.SegmentID][]byte
}

type fileTarget struct {
	f    *os.File
	want []byte
	res  int64
}

func (s *fileSink) OpenTarget(seg meta.Segment) (Target, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, string(seg.ID)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	fi, _ := f.Stat()
	return &fileTarget{f: f, want: s.want[seg.ID], res: fi.Size()}, nil
}

func (t *fileTarget) Resume() int64 { return t.res }
func (t *fileTarget) Size() int64   { return int64(len(t.want)) }
func (t *fileTarget) File() File    { return t.f }
func (t *fileTarget) Abort() error  { return t.f.Close() }
func (t *fileTarget) Commit() error {
	defer t.f.Close()
	got, err := os.ReadFile(t.f.Name())
	if err != nil {
		return err
	}
	if !bytes.Equal(got, t.want) {
		return fmt.Errorf("%w: contents differ", ErrVerify)
	}
	return nil
}

// startServer serves s on a loopback listener until the test ends.
func startServer(t testing.TB, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return l.Addr().String()
}

// proxy forwards one TCP connection at a time to upstream. The hook sees
// every byte from the server to the client: cut > 0 closes both sides
// after that many bytes, flip >= 0 inverts one bit of that byte.
type proxy struct {
	upstream string
	cut      int64 // close after this many downstream bytes; <0: never
	flip     int64 // invert bit 0x10 of this downstream byte; <0: never
	l        net.Listener
	wg       sync.WaitGroup
	passed   atomic.Int64
}

func startProxy(t testing.TB, upstream string, cut, flip int64) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{upstream: upstream, cut: cut, flip: flip, l: l}
	p.wg.Add(1)
	go p.run()
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) run() {
	defer p.wg.Done()
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			down.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(up, down); up.(*net.TCPConn).CloseWrite() }()
		go func() {
			defer p.wg.Done()
			defer down.Close()
			defer up.Close()
			buf := make([]byte, 64<<10)
			var pos int64
			for {
				n, err := up.Read(buf)
				b := buf[:n]
				if p.cut >= 0 && pos+int64(n) >= p.cut {
					b = b[:p.cut-pos]
				}
				if p.flip >= pos && p.flip < pos+int64(len(b)) {
					b[p.flip-pos] ^= 0x10
				}
				if len(b) > 0 {
					if _, werr := down.Write(b); werr != nil {
						return
					}
				}
				pos += int64(len(b))
				p.passed.Store(pos)
				if p.cut >= 0 && pos >= p.cut {
					return
				}
				if err != nil {
					down.(*net.TCPConn).CloseWrite()
					io.Copy(io.Discard, down)
					return
				}
			}
		}()
	}
}

// rawRequest sends the encoded request wire to addr and returns the
// answer.
func rawRequest(t testing.TB, addr string, wire []byte) (response, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(wire); err != nil {
		t.Fatal(err)
	}
	resp, err := readResponse(conn)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp, conn
}
