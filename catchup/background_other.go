//go:build !linux

package catchup

// inBackground runs move as it is: thread priorities are Linux's here.
func inBackground(move func() (int64, error)) (int64, error) { return move() }
