//go:build !invariants

package cluster

import "github.com/malachi-log/malachi/meta"

func (f *fsm) checkApplied() {}

func checkRestored(*meta.View, *meta.Table, uint64) {}
