package product

import (
	"strings"
	"testing"
)

// Tags name their tenant, stay within flightcache's 128 bytes whatever
// the lengths of a tenant and an id, and never collide across kinds.
func TestTagsStayWithinBoundsAndApart(t *testing.T) {
	if got := ProductTag("acme", "p-00001"); got != "product:acme/p-00001" {
		t.Fatalf("ProductTag = %q", got)
	}
	if got := CategoryTag("acme", "audio"); got != "category:acme/audio" {
		t.Fatalf("CategoryTag = %q", got)
	}
	if got := ListTag("acme"); got != "list:acme" {
		t.Fatalf("ListTag = %q", got)
	}
	tenant, id := strings.Repeat("t", MaxTenantLen), strings.Repeat("i", MaxIDLen)
	long := []string{ProductTag(tenant, id), ProductTag(tenant, id[1:]), CategoryTag(tenant, strings.Repeat("c", MaxCategoryLen)), ListTag(tenant)}
	seen := map[string]bool{}
	for _, tag := range long {
		if len(tag) > maxTagLen || seen[tag] {
			t.Fatalf("tag %q: %d bytes (bound %d), or seen before", tag, len(tag), maxTagLen)
		}
		seen[tag] = true
	}
	if ProductTag(tenant, id) != ProductTag(tenant, id) {
		t.Fatal("a hashed tag is not deterministic")
	}
}
