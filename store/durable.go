package store

import (
	"context"
	"fmt"
	"os"
)

// rewriteFooter writes the copy's footer ft again where it is and fsyncs
// the file. Writing the same bytes again is what makes the fsync reach the
// disk: after a failed fsync Linux marks the dirty pages clean, and a
// later fsync of clean pages writes nothing (invariant 10). An error
// latches c.
func (db *DB) rewriteFooter(c *copyState, op string, f File, ft Footer) error {
	if _, err := f.WriteAt(AppendFooter(nil, ft), ft.ByteSize); err != nil {
		return db.fail(c, op+": rewrite footer", err)
	}
	if err := f.Sync(); err != nil {
		return db.fail(c, op+": sync", err)
	}
	return nil
}

// syncFile makes the bytes of the loaded copy c durable unless this
// process already did since Open: a sealed copy's footer rewritten and the
// file fsynced, any other copy's file fsynced. Its directory is the
// caller's to sync; then c.synced may be set. Caller holds c.mu.
func (db *DB) syncFile(c *copyState, op string) error {
	if c.synced {
		return nil
	}
	if c.active {
		if err := c.f.Sync(); err != nil {
			return db.fail(c, op+": sync", err)
		}
		return nil
	}
	flag := os.O_RDONLY
	if c.sealed {
		flag = os.O_RDWR
	}
	f, err := db.openFile(c, op, flag)
	if err != nil {
		return err
	}
	defer f.Close()
	if c.sealed {
		if err := db.rewriteFooter(c, op, f, c.footer); err != nil {
			return err
		}
		db.mark(c, c.footer)
		return nil
	}
	if err := f.Sync(); err != nil {
		return db.fail(c, op+": sync", err)
	}
	return nil
}

// syncSealed makes the loaded copy c, its directory entry included,
// durable unless this process already did since Open (Seal of a copy
// found sealed). Caller holds c.mu.
func (db *DB) syncSealed(c *copyState, op string) error {
	if c.synced {
		return nil
	}
	if err := db.syncFile(c, op); err != nil {
		return err
	}
	if err := db.syncDir(c, op); err != nil {
		return err
	}
	c.synced = true
	return nil
}

// syncCopies makes the copies cs durable, each as syncSealed does, with
// one directory sync per shard among those that need one; errs[i] answers
// cs[i]. Caller holds every c.mu.
func (db *DB) syncCopies(op string, cs []*copyState, errs []error) {
	var need [Shards]bool
	for i, c := range cs {
		if c.synced {
			continue
		}
		if errs[i] = db.load(c, op); errs[i] == nil {
			errs[i] = db.syncFile(c, op)
		}
		if errs[i] == nil {
			need[Shard(c.id)] = true
		}
	}
	failed, unanswered := db.syncShards(context.Background(), &need)
	for i, c := range cs {
		if c.synced || errs[i] != nil {
			continue
		}
		if unanswered != nil {
			errs[i] = fmt.Errorf("%s %s: %w", op, c.id, unanswered)
			continue
		}
		if err := failed[Shard(c.id)]; err != nil {
			errs[i] = db.fail(c, op+": directory sync", err)
			continue
		}
		c.synced = true
	}
}
