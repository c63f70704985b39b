// Package bench holds the benchmarks that compare Malachi's engines side by
// side (go test -bench . -benchmem ./bench/). It has no non-test code; the
// measured figures and the machine they come from are in README.md.
//
// Fixtures are created once on the repository's disk (never tmpfs), under
// $MALACHI_BENCH_DIR or .malachi-bench beside the repository, and kept
// between runs: 100,000 files for BenchmarkProbe, 256 directories for
// BenchmarkSyncDirs. The Kafka benchmarks build malachid into kafka-bin
// there (or run $MALACHID) and run their three brokers in a directory of
// their own beside it, removed when each benchmark ends; so do the heal
// benchmarks (BenchmarkHealAtScale, BenchmarkHealPacing), four brokers
// each, which measure the machine's floor for the heal's work in the same
// round. Cold-cache benchmarks drop the page, dentry and inode caches
// before each iteration and need root; without it they skip.
//
// Invariants:
//
//  1. Every engine of one benchmark runs on the same fixture in the same
//     process, so ratios against the baseline (os.Stat loop, sequential
//     fsync) are measured under the same conditions.
//  2. A benchmark checks its results after timing: a fast wrong answer
//     fails (the pacing benchmark reads every acknowledged record back).
package bench
