// Package benchenv reads what a benchmark writes beside its figures: the
// machine's load average and the process's CPU time. Every benchmark of
// the module quotes its figures with the load of its round (the project's
// standard), through this one package.
//
// A benchmark that measures "under load" makes the load itself with a
// Spinner (one busy child process, the same in every round, started
// before the round and stopped after it) and reports the share of a core
// the spinner got, so the figure says what its load was.
//
// # Invariants
//
//  1. ReportLoad reports a load1 for every round it is called in: -1 when
//     /proc/loadavg cannot be read, never nothing.
//  2. A Spinner is the caller's child process and only Stop ends it; Stop
//     waits for it, so no spinner outlives the round that started it.
//  3. ResetPeakRSS touches only the calling process's own peak (VmHWM).
package benchenv
