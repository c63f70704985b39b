// Package harness runs clusters of real malachid processes for the staged
// fault suite (testbed/stage), the demo, the nemesis and the e2e tests: it
// locates or builds the binary, makes the cluster's certificates
// (pki.CreateLocal; insecure only when asked), writes each broker's
// config, starts, stops, kills, pauses and restarts brokers, waits for a
// leader and for registration, calls every broker through the typed admin
// client (admin), polls them for the one health check (health.go:
// Poll, Evaluate, CheckCopy, WaitHealed), and holds the fault catalogue
// (catalogue.go): every fault the staged suite and the nemesis inject,
// each once, with its undo and what it leaves for a checker to expect
// (Kind.Down, Kind.CutOff, Injection.Lost). The faults done to a copy's
// file (delete, truncate, extend, bit flip) are faults.go's; the one fault
// a broker injects itself is the latch (admin.Client.Latch): it needs the
// broker's store to see an I/O error. What the stages and tests measure
// with is here too, once: the copy auditor's cache (auditor.go), the
// backfill byte counters (metrics.go: MarkBackfill), the leader's pass
// status, PassTally and the hold releaser (passtally.go), log marks
// (logs.go), the metadata and pass judgements (judge.go) and the waits and
// scans the stages share (mechanics.go).
//
// Usage:
//
//	c, err := harness.New(harness.Config{Bin: bin, Root: dir, Brokers: 3, RF: 3})
//	defer c.Stop()             // or t.Cleanup(c.Stop)
//	err = c.Start()
//	leader, err := c.WaitReady(ctx, 20*time.Second)
//	b := c.Broker(2)
//	err = c.Kill(b); err = c.Restart(b)
//	path, err := b.CopyPath(id) // the one place that knows the copies' layout
//	f, err := harness.TruncateCopy(path, rng)
//	in, err := c.Inject(ctx, harness.Target{Kind: harness.KindPause, Brokers: []*harness.Broker{b}})
//	err = in.Undo(ctx)                     // SIGCONT; a kill's undo is Revive
//
// Everything about one broker (its addresses, data dir, process, admin
// client, the command prefix it runs under) is a field of its Broker.
// With Config.Hosts each broker runs on a host of its own (a network
// namespace from testbed/netns: its own address, ports 7001-7004, Prefix
// `nsenter --net=/run/netns/NAME --`), reachable from this process without any switch;
// Cluster.Net is then the network fault injector (host i is broker i):
//
//	undo, err := c.Net().Isolate(int(id))   // Partition, DropOutbound, DropInbound, Cap
//	stop, events, err := c.Net().Flap(int(id), 30*time.Second, seed)
//	err = c.Net().HealAll()
//
// Without root or ip/nft/tc, New lays the cluster out on loopback, says
// why in NetSkip (and Logf), and Net is nil.
//
// Invariants:
//
//  1. Every broker runs in a process group of its own; signals go to the
//     group. Unless Config.Keep, the kernel kills a broker when the process
//     that started it dies (Linux's parent-death signal).
//  2. Stop ends every broker still running (SIGTERM, SIGKILL after 3 s),
//     reaps it, and unmounts the loop disk: after it returns nothing the
//     cluster started is left running or mounted. It is safe to call
//     twice and after a failed Start. The hosts (namespaces, veths,
//     bridge, fault tables) are removed after the brokers exited.
//  3. A broker's exit is unexpected unless the harness was asked to stop
//     it (Kill, Terminate, Stop); UnexpectedExit names the first such one
//     with the tail of its log.
//  4. No code outside copies.go knows where a broker keeps a copy's file:
//     CopyPath and CopyFiles walk the broker's copies directory.
//  5. On loopback, a cluster's ports are drawn outside the kernel's
//     ephemeral range and claimed (an flock on a file per port under
//     os.TempDir()) from New until Stop: no other harness, in this process
//     or another, and no outgoing connection takes a broker's port, so a
//     start or a restart never finds it in use (ports.go).
//
// A Cluster's methods may be called from several goroutines; a Broker's
// process state is guarded by its own mutex.
package harness
