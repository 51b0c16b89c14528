package flightcache

import "context"

// BatchSharedStore is a SharedStore that reads and writes many keys per
// round trip. A Cache whose shared tier implements it serves a batch
// (GetMany, FetchMany) with one GetMany for all the keys the local tier
// missed and one SetMany per loader call for the write-back, instead of a
// round trip per key. Package redisstore implements it (MGET, or pipelined
// GETs on a Redis Cluster, whose keys live in different slots).
//
// The contract per key is SharedStore's: a missing key, or one past its
// StaleUntil, is not found; errors are expected and count as misses or as
// best-effort write failures.
type BatchSharedStore interface {
	SharedStore
	// GetMany reads keys. The result is aligned with keys. err is a
	// failure of the whole read (every key then counts as a miss); a
	// failure of one key, such as a corrupt entry, is that key's
	// Lookup.Err and leaves the other keys alone.
	GetMany(ctx context.Context, keys []string) ([]Lookup, error)
	// SetMany stores entries[i] under keys[i], each until its StaleUntil,
	// in as few round trips as the store allows. It returns nil when
	// every write succeeded, else a slice aligned with keys whose non-nil
	// elements are the writes that failed.
	SetMany(ctx context.Context, keys []string, entries []Entry) []error
}

// Lookup is one key's answer from BatchSharedStore.GetMany.
type Lookup struct {
	Entry Entry
	Found bool
	// Err is this key's failure (Found is then false).
	Err error
}
