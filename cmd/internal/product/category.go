package product

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Categories are the categories of the demo catalog. Every product has
// one, which CategoryOf derives from its ID: the seeded catalog, the rows
// a migration finds without one, and the products created through the API
// all get theirs the same way, so every instance and every test agrees on
// a product's category.
var Categories = []string{"audio", "books", "garden", "kitchen", "office", "outdoor", "tools", "toys"}

// MaxCategoryLen bounds a category name.
const MaxCategoryLen = 64

// CategoryOf is the category of the product whose ID is id: for a catalog
// ID (ProductID(n)), Categories[n mod 8], so that consecutive products
// fall in different categories and products n and n+8 share one; for any
// other ID, the category its FNV-1a hash picks.
func CategoryOf(id string) string {
	if digits, ok := strings.CutPrefix(id, "p-"); ok {
		if n, err := strconv.Atoi(digits); err == nil && n > 0 && ProductID(n) == id {
			return Categories[n%len(Categories)]
		}
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return Categories[h.Sum32()%uint32(len(Categories))]
}

// CheckCategory validates a category name: 1-64 of [a-z0-9-], starting
// with a letter or digit (the alphabet of tenants). A failure is a
// *InvalidError on the field "category".
func CheckCategory(c string) error {
	if c == "" || len(c) > MaxCategoryLen {
		return &InvalidError{Field: "category", Reason: "must be 1 to 64 characters"}
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !(isLower(b) || isDigit(b) || (b == '-' && i > 0)) {
			return &InvalidError{Field: "category", Reason: "must be lower-case letters, digits and '-', starting with a letter or digit"}
		}
	}
	return nil
}
