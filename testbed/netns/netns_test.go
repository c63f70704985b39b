package netns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// newNet makes a Net of n hosts removed at the end; it skips where
// namespaces cannot be made (not root, no ip/nft/tc), saying why.
func newNet(t *testing.T, n int) *Net {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	nt, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nt.Close(); err != nil {
			t.Error(err)
		}
	})
	return nt
}

// serve listens on TCP port 9000 and UDP port 9001 of every host; TCP
// connections are answered "ok" and closed, UDP datagrams are sent to got
// as "from>to".
func serve(t *testing.T, nt *Net) chan string {
	t.Helper()
	got := make(chan string, 1024)
	for i := 1; i <= nt.Hosts(); i++ {
		var l net.Listener
		var pc net.PacketConn
		err := nt.Do(i, func() (err error) {
			if l, err = net.Listen("tcp", nt.Addr(i)+":9000"); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp", nt.Addr(i)+":9001")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(); pc.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("ok"))
				c.Close()
			}
		}()
		go func() {
			buf := make([]byte, 64)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				got <- string(buf[:n])
			}
		}()
	}
	return got
}

// dial says whether host from (0: this process, the client) gets host
// to's "ok" over TCP within 700 ms.
func dial(nt *Net, from, to int) bool {
	try := func() error {
		c, err := net.DialTimeout("tcp", nt.Addr(to)+":9000", 700*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(700 * time.Millisecond))
		b, err := io.ReadAll(c)
		if err == nil && string(b) != "ok" {
			err = fmt.Errorf("read %q", b)
		}
		return err
	}
	if from == 0 {
		return try() == nil
	}
	return nt.Do(from, try) == nil
}

// reach is the matrix of dial: reach[a][b] for hosts 1..n (index 0
// unused), and the client in column/row 0 (client to host only).
func reach(nt *Net) [][]bool {
	n := nt.Hosts()
	m := make([][]bool, n+1)
	for a := 0; a <= n; a++ {
		m[a] = make([]bool, n+1)
		for b := 1; b <= n; b++ {
			if a != b {
				m[a][b] = dial(nt, a, b)
			}
		}
	}
	return m
}

// wantReach fails unless reach matches: cut(a, b) says a cannot reach b.
func wantReach(t *testing.T, nt *Net, what string, cut func(a, b int) bool) {
	t.Helper()
	m := reach(nt)
	for a := 0; a <= nt.Hosts(); a++ {
		for b := 1; b <= nt.Hosts(); b++ {
			if a == b {
				continue
			}
			want := a == 0 || !cut(a, b)
			for try := 0; want && !m[a][b] && try < 5; try++ {
				// A dial's 700 ms can run out on a loaded machine: a
				// link meant to be up gets more tries before it fails.
				m[a][b] = dial(nt, a, b)
			}
			if m[a][b] != want {
				t.Errorf("%s: dial %d -> %d ok = %v, want %v (0: the client)", what, a, b, m[a][b], want)
			}
		}
	}
}

func none(a, b int) bool { return false }

func TestIsolateAndPartition(t *testing.T) {
	nt := newNet(t, 4)
	serve(t, nt)
	wantReach(t, nt, "before any fault", none)
	undo, err := nt.Isolate(2)
	if err != nil {
		t.Fatal(err)
	}
	wantReach(t, nt, "host 2 isolated", func(a, b int) bool { return a == 2 || b == 2 })
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	wantReach(t, nt, "after undo", none)
	side := func(h int) bool { return h <= 2 }
	if _, err := nt.Partition([]int{1, 2}, []int{3, 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := nt.Isolate(4); err != nil { // overlapping faults
		t.Fatal(err)
	}
	wantReach(t, nt, "1,2 | 3,4 and 4 isolated", func(a, b int) bool { return side(a) != side(b) || a == 4 || b == 4 })
	if err := nt.HealAll(); err != nil {
		t.Fatal(err)
	}
	wantReach(t, nt, "after HealAll", none)
}

// udpSeen sends a datagram from host a to host b and says whether b got
// it within 500 ms.
func udpSeen(t *testing.T, nt *Net, got chan string, a, b int) bool {
	t.Helper()
	msg := fmt.Sprintf("%d>%d@%d", a, b, time.Now().UnixNano())
	err := nt.Do(a, func() error {
		c, err := net.Dial("udp", nt.Addr(b)+":9001")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(msg))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(500 * time.Millisecond)
	for {
		select {
		case m := <-got:
			if m == msg {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func TestOneWay(t *testing.T) {
	nt := newNet(t, 3)
	got := serve(t, nt)
	for _, tc := range []struct {
		name  string
		fault func() (Undo, error)
		lost  func(a, b int) bool
	}{
		{"outbound of 1", func() (Undo, error) { return nt.DropOutbound(1, nil) }, func(a, b int) bool { return a == 1 }},
		{"inbound of 1", func() (Undo, error) { return nt.DropInbound(1, nil) }, func(a, b int) bool { return b == 1 }},
		{"inbound of 1 from 3", func() (Undo, error) { return nt.DropInbound(1, []int{3}) }, func(a, b int) bool { return a == 3 && b == 1 }},
	} {
		undo, err := tc.fault()
		if err != nil {
			t.Fatal(err)
		}
		for a := 1; a <= 3; a++ {
			for b := 1; b <= 3; b++ {
				if a != b && udpSeen(t, nt, got, a, b) == tc.lost(a, b) {
					t.Errorf("%s: datagram %d -> %d arrived = %v, want %v", tc.name, a, b, !tc.lost(a, b), !tc.lost(a, b))
				}
			}
		}
		if err := undo(); err != nil {
			t.Fatal(err)
		}
	}
	if !udpSeen(t, nt, got, 1, 2) || !udpSeen(t, nt, got, 2, 1) {
		t.Error("after every undo a datagram between 1 and 2 was lost")
	}
}

func TestFlap(t *testing.T) {
	nt := newNet(t, 2)
	got := serve(t, nt)
	undo, events, err := nt.Flap(1, 4*time.Second, 7)
	if err != nil {
		t.Fatal(err)
	}
	var ups, downs int
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		if udpSeen(t, nt, got, 2, 1) {
			ups++
		} else {
			downs++
		}
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	ev := events()
	if len(ev) < 3 || !ev[0].Down || ev[len(ev)-1].Down {
		t.Errorf("flap events %v: want at least down, up, down … ending up", ev)
	}
	plan := FlapPlan(1, 4*time.Second, 7)
	if len(ev) != len(plan) {
		t.Errorf("flap made %d changes %v, its plan %d %v", len(ev), ev, len(plan), plan)
	}
	for k := range min(len(ev), len(plan)) {
		if ev[k].Down != plan[k].Down || ev[k].At < plan[k].At {
			t.Errorf("change %d: %+v, planned %+v (never early, same direction)", k, ev[k], plan[k])
		}
	}
	if ups == 0 || downs == 0 {
		t.Errorf("during the flap %d datagrams arrived and %d were lost: want both", ups, downs)
	}
	if !udpSeen(t, nt, got, 2, 1) {
		t.Error("after the flap a datagram 2 -> 1 was lost")
	}
}

func TestCap(t *testing.T) {
	nt := newNet(t, 2)
	const rate = 1 << 20 // 1 MiB/s
	const size = 3 << 20
	var l net.Listener
	if err := nt.Do(2, func() (err error) { l, err = net.Listen("tcp", nt.Addr(2)+":9100"); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recv := func() (time.Duration, error) {
		c, err := l.Accept()
		if err != nil {
			return 0, err
		}
		defer c.Close()
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		if err == nil && n != size {
			err = fmt.Errorf("received %d bytes of %d", n, size)
		}
		return time.Since(start), err
	}
	send := func() error {
		return nt.Do(1, func() error {
			c, err := net.Dial("tcp", nt.Addr(2)+":9100")
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(make([]byte, size))
			return err
		})
	}
	measure := func() float64 {
		errc := make(chan error, 1)
		go func() { errc <- send() }()
		took, err := recv()
		if err := errors.Join(err, <-errc); err != nil {
			t.Fatal(err)
		}
		return float64(size) / took.Seconds()
	}
	free := measure()
	undo, err := nt.Cap(1, rate)
	if err != nil {
		t.Fatal(err)
	}
	capped := measure()
	t.Logf("3 MiB from host 1 to 2: %.1f MiB/s uncapped, %.2f MiB/s capped at 1 MiB/s", free/(1<<20), capped/(1<<20))
	if capped > 1.3*rate {
		t.Errorf("capped at 1 MiB/s, the transfer ran at %.2f MiB/s", capped/(1<<20))
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if after := measure(); after < 2*rate {
		t.Errorf("after undo the transfer ran at %.2f MiB/s: the cap is still there", after/(1<<20))
	}
}

func TestCloseAndCleanup(t *testing.T) {
	nt := newNet(t, 2)
	names := []string{nt.NS(1), nt.NS(2), nt.bridgeNS()}
	if err := nt.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			t.Errorf("namespace %s is still there after Close", n)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + fmt.Sprintf("mlc%dr", nt.n)); err == nil {
		t.Errorf("root veth mlc%dr is still there after Close", nt.n)
	}
	// A leftover of a killed run: a namespace under a subnet nobody locks.
	stale := "mlc249-h3"
	if err := run("", "ip", "netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	live := newNet(t, 1)
	if _, err := os.Stat("/run/netns/" + stale); err == nil {
		run("", "ip", "netns", "del", stale)
		t.Fatalf("New left the stale namespace %s", stale)
	}
	if Cleanup(); !strings.HasPrefix(live.NS(1), "mlc") {
		t.Fatal(live.NS(1))
	}
	if _, err := os.Stat("/run/netns/" + live.NS(1)); err != nil {
		t.Errorf("Cleanup removed the live net's namespace %s: %v", live.NS(1), err)
	}
}

// FlapPlan alternates down and up from down, each phase 0.5–2 s, ends with
// the link up, and the same seed gives the same plan.
func TestFlapPlan(t *testing.T) {
	const d = 30 * time.Second
	plan := FlapPlan(3, d, 11)
	if !slices.Equal(plan, FlapPlan(3, d, 11)) {
		t.Fatal("the same seed gave two plans")
	}
	if slices.Equal(plan, FlapPlan(3, d, 12)) {
		t.Error("two seeds gave the same plan")
	}
	if len(plan) < int(d/(2*time.Second)) || plan[0].At != 0 || !plan[0].Down || plan[len(plan)-1].Down {
		t.Fatalf("plan %v: want at least %d changes from down at 0 to up at the end", plan, d/(2*time.Second))
	}
	for k := 1; k < len(plan); k++ {
		if plan[k].Down == plan[k-1].Down {
			t.Errorf("changes %d and %d both down=%v", k-1, k, plan[k].Down)
		}
		if gap := plan[k].At - plan[k-1].At; plan[k].At < d && (gap < 500*time.Millisecond || gap > 2*time.Second) {
			t.Errorf("phase %d lasts %v: want 0.5–2 s", k, gap)
		}
		if plan[k].At > d {
			t.Errorf("change %d at %v, after the flap's %v", k, plan[k].At, d)
		}
	}
}
