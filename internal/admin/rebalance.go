package admin

// Rebalance mirrors heal.Rebalance: what the rebalancer saw and planned in
// a pass (eligible brokers, those outside 10% of the mean, the spreads by
// count and bytes, the moves planned, why it waited).
type Rebalance struct {
	Brokers  int    `json:"brokers"`
	Outside  int    `json:"outside"`
	Count    Spread `json:"count"`
	Bytes    Spread `json:"bytes"`
	Moves    int    `json:"moves"`
	Skipped  string `json:"skipped,omitempty"`
	Balanced bool   `json:"balanced"`
}

// Spread mirrors heal.Spread.
type Spread struct {
	Min  int64   `json:"min"`
	Mean float64 `json:"mean"`
	Max  int64   `json:"max"`
}
