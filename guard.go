package flightcache

import (
	"context"
	"github.com/flightcache/flightcache/driver"
)

// filtered asks the Guard about key after a local miss and reports whether
// it turned the key away (then the Get answers ErrNotFound with
// OutcomeFiltered, and neither the shared tier nor the origin is touched).
// Callers check c.opts.Guard for nil first, so a Cache without a Guard pays one
// nil check.
func (c *Cache[V]) filtered(ctx context.Context, key string) bool {
	if c.opts.Guard.MayExist(ctx, key) {
		return false
	}
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventFiltered, driver.TierNone, nil)
	}
	return true
}
