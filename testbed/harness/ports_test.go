package harness

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// portOf is addr's port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Claims made at once by many goroutines never share a port, and every
// port is outside the kernel's ephemeral range; a released port can be
// claimed again.
func TestConcurrentClaimsNeverCollide(t *testing.T) {
	lo, hi := ephemeralRange()
	const claims, each = 16, 12
	var wg sync.WaitGroup
	got := make([]*portClaim, claims)
	errs := make([]error, claims)
	for i := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = claimPorts(each, claimCandidates())
		}()
	}
	wg.Wait()
	seen := map[int]int{}
	for i, pc := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer pc.release()
		if len(pc.addrs) != each {
			t.Fatalf("claim %d: %d ports, want %d", i, len(pc.addrs), each)
		}
		for _, a := range pc.addrs {
			p := portOf(t, a)
			if j, dup := seen[p]; dup {
				t.Errorf("port %d claimed by %d and %d at once", p, j, i)
			}
			seen[p] = i
			if p >= lo && p <= hi {
				t.Errorf("port %d is inside the ephemeral range %d-%d", p, lo, hi)
			}
		}
	}
	first := portOf(t, got[0].addrs[0])
	again, err := claimPorts(1, []int{first})
	if err == nil {
		again.release()
		t.Fatalf("port %d claimed again while held", first)
	}
	got[0].release()
	again, err = claimPorts(1, []int{first})
	if err != nil {
		t.Fatalf("port %d not claimable after its release: %v", first, err)
	}
	again.release()
}

// A port another claim holds and a port something listens on are skipped.
func TestClaimSkipsLockedAndBoundPorts(t *testing.T) {
	held, err := claimPorts(3, claimCandidates())
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	locked, bound, free := portOf(t, held.addrs[0]), portOf(t, held.addrs[1]), portOf(t, held.addrs[2])
	// bound: unlocked but listened on by someone who never claimed it.
	held.locks[1].Close()
	l, err := net.Listen("tcp", held.addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held.locks[2].Close()
	held.locks = held.locks[:1]
	pc, err := claimPorts(1, []int{locked, bound, free})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.release()
	if got := portOf(t, pc.addrs[0]); got != free {
		t.Errorf("claimed port %d of [locked %d, bound %d, free %d], want %d", got, locked, bound, free, free)
	}
	if _, err := claimPorts(1, []int{locked, bound}); err == nil {
		t.Error("a claim of only a locked and a bound port succeeded")
	}
}

// Two processes claiming at the same time never share a port: this test
// runs itself as a child that claims and prints its ports while holding
// them, and claims its own meanwhile.
func TestClaimsAcrossProcessesNeverCollide(t *testing.T) {
	if os.Getenv("HARNESS_PORT_CHILD") != "" {
		pc, err := claimPorts(40, claimCandidates())
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(strings.Join(pc.addrs, " ") + "\n")
		bufio.NewReader(os.Stdin).ReadString('\n') // hold until the parent is done
		pc.release()
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClaimsAcrossProcessesNeverCollide$")
	cmd.Env = append(os.Environ(), "HARNESS_PORT_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	mine, err := claimPorts(40, claimCandidates())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.release()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error") {
		t.Fatalf("child: %q %v", line, err)
	}
	theirs := strings.Fields(line)
	if len(theirs) != 40 {
		t.Fatalf("child claimed %d ports: %q", len(theirs), line)
	}
	held := map[string]bool{}
	for _, a := range mine.addrs {
		held[a] = true
	}
	for _, a := range theirs {
		if held[a] {
			t.Errorf("%s claimed by both processes", a)
		}
	}
	// While the child holds its ports, none of them can be claimed here.
	var cands []int
	for _, a := range theirs {
		cands = append(cands, portOf(t, a))
	}
	if pc, err := claimPorts(1, cands); err == nil {
		pc.release()
		t.Errorf("claimed %v, held by the child", pc.addrs)
	}
}
