package heal

import "testing"

func TestSmoke(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 2, 3, 4))
	w.dead(1).anomaly(2, "b", Latched, 0, false).anomaly(3, "c", Short, 500, false).anomaly(4, "c", Overrun, 1040, false)
	p := w.plan()
	t.Log("\n" + ops(p))
	t.Log(p.String())
}
