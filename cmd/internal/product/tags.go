package product

import (
	"crypto/sha256"
	"encoding/hex"
)

// The tags of cached values (flightcache.SetTags), and what invalidates
// them:
//
//   - a product read alone (Get) carries its product tag and its category
//     tag: a PUT of any variant invalidates the product tag, a reprice the
//     category tag;
//   - a product read in a batch (GetMany) carries its tenant's list tag
//     only (a batch's tags are shared by every value of it, and one page
//     may hold a hundred products): a PUT and a reprice of the tenant
//     invalidate it too, so a batch-loaded copy of the product is never
//     served past either;
//   - a "not found" carries its product tag.
//
// Every tag names the tenant: no invalidation of one tenant touches
// another's values. The invalidations run through the outbox (Update,
// Reprice, RelayOutbox), so a crash or a Redis outage delays them and
// never loses one; the Cache's Bus carries them to every instance and
// retains them for the ones that are down.

// TagKind names a kind of tag, for metrics (never the tag itself, which
// holds tenant and product IDs).
type TagKind string

// The kinds of tags.
const (
	TagProduct  TagKind = "product"
	TagCategory TagKind = "category"
	TagList     TagKind = "list"
)

// maxTagLen is flightcache's bound on a tag's length in bytes.
const maxTagLen = 128

// tag is the tag of kind for tenant and name ("" for a list tag). A tag
// that would be longer than flightcache allows (a long tenant and a long
// ID) is the kind and a hash of the rest: as deterministic, shorter.
func tag(kind TagKind, tenant, name string) string {
	t := string(kind) + ":" + tenant
	if name != "" {
		t += "/" + name
	}
	if len(t) <= maxTagLen {
		return t
	}
	sum := sha256.Sum256([]byte(tenant + "/" + name))
	return string(kind) + "#" + hex.EncodeToString(sum[:16])
}

// ProductTag is the tag of every value cached for tenant's product id, in
// every locale and currency.
func ProductTag(tenant, id string) string { return tag(TagProduct, tenant, id) }

// CategoryTag is the tag of every product of tenant's category read alone.
func CategoryTag(tenant, category string) string { return tag(TagCategory, tenant, category) }

// ListTag is the tag of every product of tenant read in a batch.
func ListTag(tenant string) string { return tag(TagList, tenant, "") }
