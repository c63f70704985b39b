package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// lockDir holds one lock file per subnet number a live Net claimed.
const lockDir = "/run/malachi-netns"

// maxNets is the number of subnets (10.213.1.0/24 … 10.213.250.0/24).
const maxNets = 250

// Net is a bridge and n hosts, each in its own network namespace.
type Net struct {
	n     int      // the subnet number: 10.213.n.0/24
	hosts int      // hosts 1..hosts
	lock  *os.File // flock held for the Net's life

	mu     sync.Mutex
	seq    int              // the last fault table's number
	flaps  map[int]*flap    // running flaps by sequence number
	tables map[string][]int // fault table name -> hosts that hold it
	caps   map[int]bool     // hosts with a tbf
	closed bool
}

// Available says why namespaces cannot be made here (not root, a missing
// tool), nil when they can.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: not root (network namespaces need CAP_SYS_ADMIN)")
	}
	for _, tool := range []struct{ name, pkg string }{{"ip", "iproute2"}, {"nft", "nftables"}, {"tc", "iproute2"}, {"nsenter", "util-linux"}} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Errorf("netns: %s not installed (Debian package %s; `make deps` installs it): %w", tool.name, tool.pkg, err)
		}
	}
	return availableOS()
}

// run runs a command, with stdin when not empty; its error names the
// command and carries its output.
func run(stdin string, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inNS prefixes a command to run in namespace ns: nsenter into its network
// namespace only (see Prefix: `ip netns exec` would also copy every mount
// of the moment into a mount namespace of its own while the command runs).
func inNS(ns string, args ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + ns, "--"}, args...)
}

// New claims a free subnet and makes the bridge namespace, one namespace
// per host with its veth on the bridge and its address, and the root veth
// for the client. Leftovers of killed runs are removed first.
func New(hosts int) (*Net, error) {
	if hosts < 1 || hosts > 200 {
		return nil, fmt.Errorf("netns: %d hosts: want 1 to 200", hosts)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	Cleanup()
	nt := &Net{hosts: hosts, flaps: map[int]*flap{}, tables: map[string][]int{}, caps: map[int]bool{}}
	for n := 1; n <= maxNets && nt.lock == nil; n++ {
		if f := tryLock(n); f != nil {
			nt.n, nt.lock = n, f
		}
	}
	if nt.lock == nil {
		return nil, fmt.Errorf("netns: all %d subnets of 10.213.0.0/16 are in use", maxNets)
	}
	removeNet(nt.n) // anything left under our number is stale: we hold its lock
	if err := nt.build(); err != nil {
		nt.Close()
		return nil, err
	}
	return nt, nil
}

// build makes the namespaces, bridge and veths of nt.
func (nt *Net) build() error {
	br, p := nt.bridgeNS(), fmt.Sprintf("mlc%d", nt.n)
	steps := [][]string{
		{"ip", "netns", "add", br},
		inNS(br, "ip", "link", "set", "lo", "up"),
		inNS(br, "ip", "link", "add", p+"br", "type", "bridge"),
		inNS(br, "ip", "link", "set", p+"br", "up"),
		{"ip", "link", "add", p + "r", "type", "veth", "peer", "name", p + "R", "netns", br},
		{"ip", "addr", "add", nt.ClientAddr() + "/24", "dev", p + "r"},
		{"ip", "link", "set", p + "r", "up"},
		inNS(br, "ip", "link", "set", p+"R", "master", p+"br", "up"),
	}
	for i := 1; i <= nt.hosts; i++ {
		h, port := nt.NS(i), fmt.Sprintf("%sb%d", p, i)
		steps = append(steps,
			[]string{"ip", "netns", "add", h},
			inNS(h, "ip", "link", "set", "lo", "up"),
			inNS(h, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", br),
			inNS(h, "ip", "addr", "add", nt.Addr(i)+"/24", "dev", "eth0"),
			inNS(h, "ip", "link", "set", "eth0", "up"),
			inNS(br, "ip", "link", "set", port, "master", p+"br", "up"),
		)
	}
	for _, s := range steps {
		if err := run("", s...); err != nil {
			return err
		}
	}
	return nil
}

// Hosts is the number of hosts.
func (nt *Net) Hosts() int { return nt.hosts }

// Addr is host i's address (10.213.N.i).
func (nt *Net) Addr(i int) string { return fmt.Sprintf("10.213.%d.%d", nt.n, i) }

// ClientAddr is the calling process's address on the bridge's segment.
func (nt *Net) ClientAddr() string { return fmt.Sprintf("10.213.%d.254", nt.n) }

// NS is host i's namespace name.
func (nt *Net) NS(i int) string { return fmt.Sprintf("mlc%d-h%d", nt.n, i) }

// bridgeNS is the bridge's namespace name.
func (nt *Net) bridgeNS() string { return fmt.Sprintf("mlc%d-br", nt.n) }

// Prefix is the command prefix that runs a process on host i: nsenter
// into the host's network namespace only, then exec (same pid). Not `ip
// netns exec`, which also gives the process a mount namespace of its own
// holding a private copy of every mount of the moment: a loop disk another
// test mounted then stays mounted in that copy after its umount, and its
// e2fsck fails with "device in use" (seen when the fault suite's loop
// disks and the network tests ran at once).
func (nt *Net) Prefix(i int) []string {
	return []string{"nsenter", "--net=/run/netns/" + nt.NS(i), "--"}
}

// Close stops every flap and removes the namespaces (and with them the
// veths, the bridge, the fault tables and the qdiscs), then releases the
// subnet. Safe twice; the error names what could not be removed.
func (nt *Net) Close() error {
	nt.mu.Lock()
	if nt.closed {
		nt.mu.Unlock()
		return nil
	}
	nt.closed = true
	flaps := nt.flaps
	nt.flaps = map[int]*flap{}
	nt.mu.Unlock()
	for _, f := range flaps {
		f.stop()
	}
	err := removeNet(nt.n)
	nt.lock.Close() // releases the flock
	return err
}

// tryLock takes subnet n's lock without waiting; nil when another
// process (or another Net of this one) holds it.
func tryLock(n int) *os.File {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(n)+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	return f
}

var (
	nsName   = regexp.MustCompile(`^mlc(\d+)-(br|h\d+)$`)
	rootLink = regexp.MustCompile(`^\d+: mlc(\d+)r[@:]`)
)

// Cleanup removes the namespaces and root veths of every subnet whose
// lock no live Net holds: leftovers of a run that was killed. It returns
// how many subnets it cleaned.
func Cleanup() int {
	stale := map[int]bool{}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if m := nsName.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			stale[n] = true
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if m := rootLink.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				stale[n] = true
			}
		}
	}
	cleaned := 0
	for n := range stale {
		if f := tryLock(n); f != nil {
			removeNet(n)
			f.Close()
			cleaned++
		}
	}
	return cleaned
}

// removeNet deletes every namespace named mlcN-* and the root veth mlcNr.
func removeNet(n int) error {
	var errs []error
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if m := nsName.FindStringSubmatch(e.Name()); m != nil && m[1] == strconv.Itoa(n) {
			if err := run("", "ip", "netns", "del", e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Deleting the bridge's namespace destroys the peer of the root veth
	// and, asynchronously, the root end with it: a link that vanished
	// between the look and the delete is removed, not an error.
	link := fmt.Sprintf("mlc%dr", n)
	if _, err := os.Stat("/sys/class/net/" + link); err == nil {
		if err := run("", "ip", "link", "del", link); err != nil {
			if _, still := os.Stat("/sys/class/net/" + link); still == nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
