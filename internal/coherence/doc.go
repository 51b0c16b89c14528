// Package coherence is where a flightcache.Cache decides what it may write
// to a tier and what it may serve. It works on keys, read times, tickets and
// states, never on values: the Cache does the I/O, and asks here first.
//
// Each promise of the Cache's consistency model (docs/ARCHITECTURE.md,
// "What is promised") is one decision in this package:
//
//	promise                                        decision
//	explicit writes win over the read path         Tickets: Begin, Explicit, Ticket.Current
//	a load that began before an explicit write     Model.DecideFill (a load's outdated ticket:
//	  is older than it                               FillSkip, no fence raised)
//	a bulk invalidation outdates the writes of     Tickets.Bulk, Ticket.Current
//	  its keys in progress
//	monotonic reads per instance, for the          Model.DecideFill, Fences.Covered (key floors),
//	  50,000 most recently filled keys               Fences.NoteKey (one fence per key)
//	an invalidated shared entry is not served      Fences.Covered (key floors, bulk fences)
//	while the Bus is down, local items are         Trust.Trusted (fresh and stale alike)
//	  served for BusDownTTL at most
//	only a fenced write reaches the shared tier    SharedWritable
//	  in cluster mode
//	a load that ends after Close writes nothing    Model.DecideFill, SharedWritable
//	an invalidation drops only the local copies    Invalidates
//	  read before it (late, repeated, reordered
//	  ones drop nothing newer)
//	a write the others did not hear of is redone   Redo (Add keeps the newest per target)
//	a version from the future is taken as now      Clamp
//	a tagged value read before a fence of one of   TagFences.Local, TagFences.Shared,
//	  its tags is absent (stale only when expired);  TagFences.Note (forward only)
//	  a load fenced after it began is not stored
//
// Times are of two kinds, and every function says which it takes: the
// Cache's clock (Options.Now, for what the local tier holds) and the wall
// clock (what the shared tier and other instances hold, truncated to the
// microsecond, the Bus's precision).
package coherence
