package sim

// Capacities (Config.Capacities, rink-sim -capacities): members of
// unequal capacities (rink.WithCapacity), which the leader gives shares
// of the slots in proportion to (exact rational shares: see plan's
// shares, which members of equal capacities never reach), and balances
// the load per capacity. Only the standing checks run: the members report
// their load (see simhook.Config.Load), so the leader balances by load
// and the slots a member holds at the end are not its share by count;
// Config.Load's check of the balance assumes equal capacities.

// capacities are the members' capacities with Config.Capacities: member i
// (every process under the name "m<i>") has capacities[i mod 4].
var capacities = []float64{1, 2, 0.5, 3}

// capacityOf is member i's capacity with Config.Capacities.
func capacityOf(i int) float64 { return capacities[i%len(capacities)] }
