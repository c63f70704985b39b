package catchup

import (
	"testing"

	"github.com/malachi-log/malachi/store"
)

// On Linux the default write-behind is sync_file_range(2) itself: a copy
// of a few windows issues calls, and arrives whole.
func TestStoreWriteBehindDefault(t *testing.T) {
	fx := newStoreFixture(t, store.Options{}, "")
	seg, _ := sealed(t, fx.src, "seg-wbdef", 0, 200, 20000, 5)
	fx.cl.wbWindow = 512 << 10
	if _, err := fx.fetch(t, fx.addr, seg); err != nil {
		t.Fatal(err)
	}
	fx.checkSame(t, seg)
	if st := fx.cl.Stats(); st.Writeback < 3 {
		t.Fatalf("Stats %+v: want sync_file_range calls", st)
	}
}
