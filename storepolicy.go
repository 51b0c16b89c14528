package flightcache

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// storePolicy is how one loaded value is to be stored. The Cache puts a
// fresh one on every loader's context; the loader changes it through SetTTL,
// NoStore and SetTags, and the Cache reads it once the loader has returned.
// Its fields are atomic or locked so that a loader that fans out to
// goroutines may call them from any of them (calls made after the loader
// returned are ignored).
type storePolicy struct {
	ttl     atomic.Int64 // time.Duration; 0 means the Cache's TTL
	noStore atomic.Bool

	// tagged is set by the first SetTags: an untagged load never takes
	// tagMu.
	tagged atomic.Bool
	tagMu  sync.Mutex
	tags   []string // checked, without repeats; guarded by tagMu
	tagErr error    // the first tags out of bounds; guarded by tagMu
}

// addTags adds tags to the load's, keeping the first error.
func (p *storePolicy) addTags(tags []string) {
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	p.tagged.Store(true)
	if p.tagErr != nil || len(tags) == 0 {
		return
	}
	p.tags, p.tagErr = checkTags(append(slices.Clip(p.tags), tags...))
}

// inherit adds the tags of a Batcher's call (or why they are out of
// bounds) to a member flight's.
func (p *storePolicy) inherit(tags []string, err error) {
	if err == nil {
		p.addTags(tags)
		return
	}
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	p.tagged.Store(true)
	if p.tagErr == nil {
		p.tagErr = err
	}
}

// tagList returns the load's tags, or why they are out of bounds. The
// slice is shared by every value of the load and never modified after.
func (p *storePolicy) tagList() ([]string, error) {
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	return slices.Clip(p.tags), p.tagErr
}

type policyKey struct{}

func policyFrom(ctx context.Context) *storePolicy {
	if ctx == nil {
		return nil
	}
	p, _ := ctx.Value(policyKey{}).(*storePolicy)
	return p
}

// SetTTL, called by a LoadFunc on its ctx, stores the value it returns with
// ttl instead of the Cache's TTL (adaptive caching: a value that rarely
// changes can live longer, a volatile one shorter). The ttl is used as is,
// without jitter, capped at the Cache's Options.MaxTTL; a ttl <= 0 means NoStore. It applies to
// a "not found" result too, in place of NegativeTTL. It is a no-op on any
// other context, so a loader can call it unconditionally.
func SetTTL(ctx context.Context, ttl time.Duration) {
	p := policyFrom(ctx)
	if p == nil {
		return
	}
	if ttl <= 0 {
		p.noStore.Store(true)
		return
	}
	p.ttl.Store(int64(min(ttl, MaxTTL)))
}

// NoStore, called by a LoadFunc on its ctx, returns the value to the waiting
// callers without storing it in any tier (for example a degraded answer that
// must not outlive the outage). It is a no-op on any other context.
func NoStore(ctx context.Context) {
	if p := policyFrom(ctx); p != nil {
		p.noStore.Store(true)
	}
}
