package handkey

import (
	"context"
	"testing"
)

// Test files are exempt: their keys are synthetic.
func TestKeys(t *testing.T) {
	var s Server
	_, _ = s.cache.Get(context.Background(), "k"+t.Name(), load)
}
