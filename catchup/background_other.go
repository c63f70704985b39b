//go:build !linux

package catchup

// inBackground runs run as it is: thread priorities are Linux's here.
func inBackground(run func()) { run() }
