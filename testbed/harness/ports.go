package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Loopback ports for brokers are drawn outside the kernel's ephemeral
// range (net.ipv4.ip_local_port_range), where the kernel never hands one
// out for an outgoing connection or a listener on port 0, and each is
// claimed with an flock on a file per port under os.TempDir(), so no two
// harnesses, in this process or another, hold the same port at once. A
// claim lasts as long as the cluster (Stop releases it), so a broker
// restarted by Restart binds its own port again without a race: the port
// a free-port probe found could otherwise be taken by anyone between the
// probe and the broker's bind ("address already in use").

// minClaimPort is the lowest port a claim draws from.
const minClaimPort = 10000

// portLockDir is where the per-port lock files live. They are never
// removed: unlinking a lock file while another process holds it would let
// a third lock a new file of the same name.
func portLockDir() string { return filepath.Join(os.TempDir(), "malachi-harness-ports") }

// ephemeralRange reads the kernel's ephemeral port range; Linux's default
// where it cannot be read.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// claimCandidates are the ports a claim may draw: from minClaimPort to
// 65535 outside the ephemeral range, in a random order. When the
// ephemeral range covers them all, every port from minClaimPort (the lock
// and the bind check still keep claims apart).
func claimCandidates() []int {
	lo, hi := ephemeralRange()
	var ports []int
	for p := minClaimPort; p <= 65535; p++ {
		if p < lo || p > hi {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		for p := minClaimPort; p <= 65535; p++ {
			ports = append(ports, p)
		}
	}
	rand.Shuffle(len(ports), func(i, j int) { ports[i], ports[j] = ports[j], ports[i] })
	return ports
}

// portClaim is n loopback ports held for their user.
type portClaim struct {
	addrs []string
	locks []*os.File
}

// release drops the claim's locks (closing a file releases its flock).
func (pc *portClaim) release() {
	for _, f := range pc.locks {
		f.Close()
	}
	pc.locks = nil
}

// claimPorts claims n ports from candidates, in order: a port is taken
// when its lock file can be locked without waiting and 127.0.0.1:port can
// be bound (then closed); a port locked by another claim or bound by
// anything else is skipped.
func claimPorts(n int, candidates []int) (*portClaim, error) {
	dir := portLockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("harness: the port lock directory: %w", err)
	}
	// Shared by every user's harness, like /tmp itself (best effort: only
	// its owner may change it).
	_ = os.Chmod(dir, 0o777|os.ModeSticky)
	pc := &portClaim{}
	for _, p := range candidates {
		if len(pc.addrs) == n {
			break
		}
		f, ok, err := lockPort(dir, p)
		if err != nil {
			pc.release()
			return nil, err
		}
		if !ok {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		pc.addrs, pc.locks = append(pc.addrs, addr), append(pc.locks, f)
	}
	if len(pc.addrs) < n {
		pc.release()
		return nil, fmt.Errorf("harness: only %d free loopback ports of %d wanted outside the ephemeral range", len(pc.addrs), n)
	}
	return pc, nil
}

// lockPort takes port's lock file in dir without waiting: ok false when
// another claim holds it.
func lockPort(dir string, port int) (f *os.File, ok bool, err error) {
	path := filepath.Join(dir, strconv.Itoa(port))
	// Read-only is enough for flock, and opens another user's file.
	f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, false, fmt.Errorf("harness: port lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("harness: locking %s: %w", path, err)
	}
	return f, true, nil
}

// processClaims are FreeLoopbackPorts's claims, held until the process
// exits (an unreferenced *os.File would be closed by its finalizer,
// dropping the lock).
var processClaims struct {
	sync.Mutex
	held []*portClaim
}

// FreeLoopbackPorts returns n distinct free TCP addresses on 127.0.0.1,
// outside the kernel's ephemeral range and claimed (a lock file per port)
// until this process exits, so that no other harness takes them; nothing
// listens on them when it returns.
func FreeLoopbackPorts(n int) ([]string, error) {
	pc, err := claimPorts(n, claimCandidates())
	if err != nil {
		return nil, err
	}
	processClaims.Lock()
	processClaims.held = append(processClaims.held, pc)
	processClaims.Unlock()
	return pc.addrs, nil
}
