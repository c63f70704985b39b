// Package psi reads the kernel's pressure stall information: how much of
// the last 10, 60 and 300 seconds tasks spent stalled waiting for a
// resource (/proc/pressure/io, /proc/pressure/cpu; Linux 4.20 and later
// with CONFIG_PSI). It decides nothing; package pace does.
//
// # Usage
//
//	r := psi.Reader{Dir: psi.DefaultDir}
//	p, err := r.Read()  // once per interval
//	if err != nil { ... } // a file present but unreadable or malformed
//	if p.IO.Known { use(p.IO.Some.Avg10) }
//
// # Format
//
// Each file holds a "some" line and, for io always and for cpu on newer
// kernels, a "full" line:
//
//	some avg10=0.66 avg60=0.92 avg300=6.19 total=2214394
//	full avg10=0.00 avg60=0.31 avg300=4.18 total=1593821
//
// # Invariants
//
//  1. A missing file or directory (a kernel without PSI, or one booted
//     with psi=0, which answers EOPNOTSUPP) is not an error: that
//     resource is reported with Known false.
//  2. A file that is present but malformed is an error naming the file,
//     the line and the field; nothing of that file is reported Known.
//  3. Fields other than avg10, avg60, avg300 and total are ignored, so a
//     kernel that adds one is still read; those four are required on each
//     line.
//
// # Concurrency
//
// A Reader holds no state: Read may be called from any goroutine.
package psi
