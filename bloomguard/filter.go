package bloomguard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// Defaults for Config.
const (
	DefaultExpectedItems     = 1_000_000
	DefaultFalsePositiveRate = 0.01
)

// ErrInvalidConfig is matched by the errors New returns for a Config out of
// range.
var ErrInvalidConfig = errors.New("bloomguard: invalid config")

// ErrClosed is returned by RebuildEvery after Close.
var ErrClosed = errors.New("bloomguard: filter closed")

// Config configures a Filter. The zero value is usable.
type Config struct {
	// ExpectedItems is the number of (tenant, id) pairs the filter is sized
	// for. Default DefaultExpectedItems. A Rebuild sizes for at least 5/4
	// of the pairs the previous Rebuild saw.
	ExpectedItems uint
	// FalsePositiveRate is the target share of absent IDs answered "maybe",
	// in (0, 1). Default DefaultFalsePositiveRate (1 %).
	FalsePositiveRate float64
	// MaxAge, when positive, makes the filter answer "maybe" once its
	// source was read longer than MaxAge ago (the rebuilds stalled), so
	// IDs created elsewhere since cannot be turned away for long.
	// Default 0: no limit.
	MaxAge time.Duration
	// Logger receives the failures of scheduled rebuilds. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock for MaxAge and Stats. Default time.Now.
	Now func() time.Time
}

// Source streams every (tenant, id) that exists at the origin into add. It
// returns an error (and the Rebuild keeps the current filter) when it could
// not stream them all, ctx's end included.
type Source func(ctx context.Context, add func(tenant, id string)) error

// Filter answers whether an ID may exist in a tenant. MayContain is
// lock-free; Add and Rebuild are safe to call concurrently with it and with
// each other. Build one with New.
type Filter struct {
	// Configuration, read-only after New.
	expected uint
	fpRate   float64
	maxAge   time.Duration
	log      *slog.Logger
	now      func() time.Time

	// cur is the generation readers use; never nil. Only Rebuild replaces
	// it, under mu.
	cur atomic.Pointer[generation]
	// mu orders Add against Rebuild's swap: an Add stores into the current
	// generation's added set under mu, and Rebuild copies that set into the
	// new filter and swaps under mu, so no Add falls between the copy and
	// the swap.
	mu sync.Mutex
	// rebuilding lets one Rebuild run at a time; it is held while the
	// source is read, when mu is not.
	rebuilding sync.Mutex

	filtered        atomic.Uint64
	rebuilds        atomic.Uint64
	rebuildFailures atomic.Uint64
	lastRebuild     atomic.Int64 // nanoseconds the last successful Rebuild took

	// Scheduled rebuilds: registered under mu while !closed, so Close sees
	// every one it has to stop and wait for.
	closed  bool
	cancels []context.CancelFunc
	bg      sync.WaitGroup
}

// generation is one published filter and the IDs added while it is current.
type generation struct {
	// bloom is nil until the first Rebuild (answer "maybe"). Never written
	// after the generation is published, so readers need no lock.
	bloom *bloom.BloomFilter
	// items counts the pairs put into bloom: the source's and the replayed
	// additions.
	items    uint64
	sourceAt time.Time // when Rebuild started reading the source
	fill     float64   // share of bloom's bits set
	// added holds the keys Added while this generation is current; written
	// under Filter.mu only, read lock-free. nAdded is its size, so readers
	// skip the lookup while it is empty.
	added  sync.Map // encoded key (string) → struct{}
	nAdded atomic.Int64
}

// New returns a Filter that answers "maybe" until its first Rebuild. It
// returns an error matching ErrInvalidConfig for a Config out of range.
func New(cfg Config) (*Filter, error) {
	if cfg.ExpectedItems == 0 {
		cfg.ExpectedItems = DefaultExpectedItems
	}
	if cfg.FalsePositiveRate == 0 {
		cfg.FalsePositiveRate = DefaultFalsePositiveRate
	}
	if !(cfg.FalsePositiveRate > 0 && cfg.FalsePositiveRate < 1) {
		return nil, fmt.Errorf("%w: FalsePositiveRate %v is not in (0, 1)", ErrInvalidConfig, cfg.FalsePositiveRate)
	}
	if cfg.MaxAge < 0 {
		return nil, fmt.Errorf("%w: negative MaxAge %v", ErrInvalidConfig, cfg.MaxAge)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Filter{
		expected: cfg.ExpectedItems,
		fpRate:   cfg.FalsePositiveRate,
		maxAge:   cfg.MaxAge,
		log:      cfg.Logger,
		now:      cfg.Now,
	}
	f.cur.Store(&generation{})
	return f, nil
}

// appendKey appends the injective encoding of (tenant, id): the tenant's
// length, the tenant, the id. No two pairs share an encoding, whatever
// bytes they hold.
func appendKey(b []byte, tenant, id string) []byte {
	b = binary.AppendUvarint(b, uint64(len(tenant)))
	b = append(b, tenant...)
	return append(b, id...)
}

// MayContain reports whether id may exist in tenant: false only if id was
// neither yielded by the last successful Rebuild's source nor added since.
// It answers true before the first Rebuild and, with MaxAge, when the filter
// is too old. It takes no lock.
func (f *Filter) MayContain(tenant, id string) bool {
	g := f.cur.Load()
	if g.bloom == nil {
		return true
	}
	var buf [96]byte
	k := appendKey(buf[:0], tenant, id)
	if g.bloom.Test(k) {
		return true
	}
	if g.nAdded.Load() > 0 {
		if _, ok := g.added.Load(string(k)); ok {
			return true
		}
	}
	if f.maxAge > 0 && f.now().Sub(g.sourceAt) > f.maxAge {
		return true
	}
	f.filtered.Add(1)
	return false
}

// Add records that id exists in tenant; MayContain answers true for it from
// the moment Add returns, including across a Rebuild whose source was read
// before the ID was stored. Call it for every creation once the ID is
// stored at the origin and before acknowledging the creation: the next
// Rebuild copies the ID in whatever its source says, but the one after
// that trusts its source. Safe concurrently with MayContain and Rebuild.
func (f *Filter) Add(tenant, id string) {
	k := string(appendKey(nil, tenant, id))
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.cur.Load()
	if _, loaded := g.added.LoadOrStore(k, struct{}{}); !loaded {
		g.nAdded.Add(1)
	}
}

// Rebuild builds a new filter from src and swaps it in, with every ID added
// since the current filter was published (those added while src runs
// included). On error the current filter stays. Rebuilds run one at a time;
// a second call waits for the first.
func (f *Filter) Rebuild(ctx context.Context, src Source) error {
	f.rebuilding.Lock()
	defer f.rebuilding.Unlock()
	start := f.now()
	realStart := time.Now()

	size := max(f.expected, uint(f.cur.Load().items/4*5))
	b := bloom.NewWithEstimates(size, f.fpRate)
	var items uint64
	var kb []byte
	err := src(ctx, func(tenant, id string) {
		kb = appendKey(kb[:0], tenant, id)
		b.Add(kb)
		items++
	})
	if err != nil {
		f.rebuildFailures.Add(1)
		return fmt.Errorf("bloomguard: rebuild: %w", err)
	}

	g := &generation{bloom: b, sourceAt: start}
	f.mu.Lock()
	old := f.cur.Load()
	old.added.Range(func(k, _ any) bool {
		b.AddString(k.(string))
		items++
		return true
	})
	g.items = items
	// Counting the set bits is O(bits/64), about 3 ms at 100M IDs, once
	// per Rebuild; it holds up Adds for that long, not reads.
	g.fill = float64(b.BitSet().Count()) / float64(b.Cap())
	f.cur.Store(g)
	f.mu.Unlock()

	f.rebuilds.Add(1)
	f.lastRebuild.Store(int64(time.Since(realStart)))
	return nil
}

// RebuildEvery rebuilds f from src every interval in a goroutine, until ctx
// ends or Close is called; Close waits for it. A failed rebuild is logged
// and counted in Stats, and tried again at the next tick. It does not build
// the filter now: call Rebuild first for that.
func (f *Filter) RebuildEvery(ctx context.Context, interval time.Duration, src Source) error {
	if interval <= 0 {
		return fmt.Errorf("%w: rebuild interval %v is not positive", ErrInvalidConfig, interval)
	}
	ctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		return ErrClosed
	}
	f.cancels = append(f.cancels, cancel)
	f.bg.Add(1)
	f.mu.Unlock()

	go func() {
		defer f.bg.Done()
		defer cancel()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ctx.Err() != nil {
					return // select picks at random when both are ready
				}
				if err := f.Rebuild(ctx, src); err != nil && ctx.Err() == nil {
					f.log.LogAttrs(ctx, slog.LevelWarn, "bloomguard: scheduled rebuild failed; keeping the current filter",
						slog.Any("error", err))
				}
			}
		}
	}()
	return nil
}

// Close stops the scheduled rebuilds, cancelling one that is running, and
// waits for them. The Filter still answers MayContain and Add afterwards.
// It is idempotent.
func (f *Filter) Close() error {
	f.mu.Lock()
	f.closed = true
	cancels := f.cancels
	f.cancels = nil
	f.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	f.bg.Wait()
	return nil
}

// Stats is a snapshot of a Filter, for metrics.
type Stats struct {
	// Built: a Rebuild has succeeded; before that the filter answers
	// "maybe" to everything.
	Built bool
	// Items is the number of pairs in the Bloom filter: what the last
	// Rebuild's source yielded plus the additions it replayed.
	Items uint64
	// Added is the number of pairs added since the last Rebuild, kept
	// exactly beside the filter.
	Added int64
	// Bits and HashFunctions are the filter's m and k.
	Bits, HashFunctions uint
	// FillRatio is the share of the filter's bits that are set.
	FillRatio float64
	// EstimatedFalsePositiveRate is FillRatio^HashFunctions: the chance
	// that an absent pair finds all its bits set.
	EstimatedFalsePositiveRate float64
	// SourceReadAt is when the last successful Rebuild started reading its
	// source.
	SourceReadAt time.Time
	// RebuildDuration is how long the last successful Rebuild took.
	RebuildDuration time.Duration
	// Rebuilds and RebuildFailures count Rebuild calls by result.
	Rebuilds, RebuildFailures uint64
	// Filtered counts MayContain calls that answered false.
	Filtered uint64
}

// Stats returns a snapshot of f's state and counters.
func (f *Filter) Stats() Stats {
	g := f.cur.Load()
	s := Stats{
		Added:           g.nAdded.Load(),
		RebuildDuration: time.Duration(f.lastRebuild.Load()),
		Rebuilds:        f.rebuilds.Load(),
		RebuildFailures: f.rebuildFailures.Load(),
		Filtered:        f.filtered.Load(),
	}
	if g.bloom != nil {
		s.Built = true
		s.Items = g.items
		s.Bits, s.HashFunctions = g.bloom.Cap(), g.bloom.K()
		s.FillRatio = g.fill
		s.EstimatedFalsePositiveRate = math.Pow(g.fill, float64(g.bloom.K()))
		s.SourceReadAt = g.sourceAt
	}
	return s
}
