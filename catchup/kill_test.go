package catchup

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// A target process killed (SIGKILL) mid-transfer resumes, in a new
// process, from its durable end: the last whole frame it had written,
// never from zero and never past a torn frame. Three kills at random
// points, then a run that completes.
func TestKilledTargetResumes(t *testing.T) {
	if os.Getenv("CATCHUP_KILL_CHILD") == "1" {
		killChild(t)
		return
	}
	src := openDB(t, t.TempDir(), store.Options{})
	seg, bounds := sealed(t, src, "seg-kill", 0, 200, 40000, 11) // ~4 MiB
	size := seg.ByteSize + store.FooterSize
	srv := &Server{Source: StoreSource{DB: src}, Self: testSource, Tickets: testCA}
	addr := startServer(t, srv)
	dstDir := t.TempDir()
	segJSON, _ := json.Marshal(seg)
	rng := rand.New(rand.NewPCG(5, 5))

	var durable int64
	for kill := 0; kill < 3 && durable < size; kill++ {
		at := durable + 1 + rng.Int64N((size-durable)/2)
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledTargetResumes$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CATCHUP_KILL_CHILD=1", "CATCHUP_KILL_DIR="+dstDir,
			"CATCHUP_KILL_ADDR="+addr, "CATCHUP_KILL_SEG="+string(segJSON),
			"CATCHUP_KILL_TICKET="+hex.EncodeToString(storeTicket(t, seg, nil)))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var from, done int64 = -1, 0
		for sc.Scan() && done < at {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "progress" {
				done, _ = strconv.ParseInt(f[1], 10, 64)
				if from < 0 {
					from = done
				}
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		if from != durable {
			t.Fatalf("kill %d: child resumed at %d, want the durable end %d", kill, from, durable)
		}
		fi, err := os.Stat(store.CopyPath(dstDir, seg.ID))
		if err != nil {
			t.Fatal(err)
		}
		// A file that holds every byte (killed before or in Commit) is
		// complete; otherwise it resumes after its last whole frame.
		durable = floorBoundary(bounds, min(fi.Size(), seg.ByteSize))
		if fi.Size() == size {
			durable = size
		}
		t.Logf("kill %d after %d bytes: file holds %d, durable end %d", kill, done, fi.Size(), durable)
		if durable == 0 && done > bounds[1] {
			t.Fatalf("kill %d: whole frames arrived but the durable end is 0", kill)
		}
	}
	dst := openDB(t, dstDir, store.Options{})
	cl := &Client{}
	res, err := cl.Fetch(context.Background(), addr, seg, storeTicket(t, seg, nil), StoreSink{DB: dst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != durable {
		t.Fatalf("final run resumed at %d, want %d", res.From, durable)
	}
	if err := dst.Verify(seg.ID, seg); err != nil {
		t.Fatal(err)
	}
}

func killChild(t *testing.T) {
	var seg meta.Segment
	if err := json.Unmarshal([]byte(os.Getenv("CATCHUP_KILL_SEG")), &seg); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(os.Getenv("CATCHUP_KILL_DIR"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 2 MiB/s in chunks of 256 KiB: about 2 s for the copy, progress
	// (and so the kill) every 256 KiB.
	th, _ := NewThrottle(Limits{BytesPerSecond: 2 << 20})
	ticket, err := hex.DecodeString(os.Getenv("CATCHUP_KILL_TICKET"))
	if err != nil {
		t.Fatal(err)
	}
	cl := &Client{Throttle: th}
	_, err = cl.Fetch(context.Background(), os.Getenv("CATCHUP_KILL_ADDR"), seg, ticket, StoreSink{DB: db}, func(done, total int64) {
		fmt.Printf("progress %d %d\n", done, total)
	})
	fmt.Println("done", err)
	db.Close()
}
