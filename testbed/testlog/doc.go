// Package testlog is a log sink for tests: loggers on other goroutines
// write to a Buffer while the test reads what they wrote.
//
// Invariant: every method is safe for concurrent use.
package testlog
