// Package coherence is where a flightcache.Cache decides what it may write
// to a tier, what it may serve, and what an invalidation drops. It works on
// keys, read times, tickets and states, never on values: the Cache does the
// I/O (tier calls, Bus publishes; the local tier through Local), and asks
// here first.
//
// Each promise of the Cache's consistency model (docs/ARCHITECTURE.md,
// "Coherence") is one function of this package:
//
//	promise                                        function
//	explicit writes win over the read path         Model.Explicit (its number
//	                                                 in the key's ledger record)
//	a load outdated by this instance's write       Model.DecideFill
//	  stores nothing; one outdated by another's
//	  records the version it served
//	a bulk invalidation outdates the writes of     Model.Bulk (its number in
//	  its keys in progress                           the prefix's one record)
//	monotonic reads per instance, for the          Ledger.NoteKey (one record
//	  50,000 most recently filled keys               per key, LRU per shard)
//	what a read serves of a shared entry           Model.AcceptShared
//	what a read serves of a local item, and        Model.LocalState
//	  for how long while the Bus is down
//	why a copy was refused                         Judgement (of the two above)
//	only a fenced write reaches the shared tier    Model.SharedWritable
//	  in cluster mode; nothing after Close
//	an invalidation received is applied: a key's   Model.Receive
//	  copy dropped and its loads outdated, a
//	  prefix walked (only fenced while the Bus is
//	  down), a tag fenced with the clock skew
//	an invalidation drops only the local copies    Invalidates
//	  read before it (late, repeated, reordered
//	  ones drop nothing newer)
//	a bulk invalidation of this instance fences    Model.InvalidateBulk
//	  its prefix before it walks the local tier
//	after the Bus was down, the local tier is      Model.Resync
//	  emptied before it is trusted again
//	a tag fence makes later reads start a new      Model.NoteTag
//	  flight
//	a write the others did not hear of is redone,  Redo.Announced
//	  the newest pending write per target
//	a version from the future is taken as now      Clamp
//	a tagged local item read before a fence of     TagFences.Local
//	  one of its tags is absent (stale only when
//	  expired); a load fenced after it began is
//	  not stored
//	the same for a tagged shared entry, with the   TagFences.Shared
//	  clock skew, as bulk fences
//	a tag's fence only moves forward               TagFences.Note
//
// Times are of two kinds, and every function says which it takes: the
// Cache's clock (Options.Now: expiry, FreshUntil, StaleUntil) and the wall
// clock (versions: driver.Meta.Version in both tiers, what other instances
// announce, truncated to the microsecond, the Bus's precision).
package coherence
