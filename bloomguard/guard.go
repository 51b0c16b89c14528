package bloomguard

import "context"

// Guard adapts a Filter to driver.Guard: it splits each cache key into
// (tenant, id) and asks the Filter. A key Split cannot split is answered
// "maybe", so a key scheme the Filter does not cover is never turned away.
type Guard struct {
	Filter *Filter
	// Split recovers the tenant and id a cache key was built from; ok is
	// false for a key it does not recognise. productd uses key.Parse.
	Split func(key string) (tenant, id string, ok bool)
}

// MayExist reports whether the value under key may exist at the origin.
func (g Guard) MayExist(_ context.Context, key string) bool {
	tenant, id, ok := g.Split(key)
	if !ok {
		return true
	}
	return g.Filter.MayContain(tenant, id)
}
