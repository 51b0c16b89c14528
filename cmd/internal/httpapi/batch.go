package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/driver"
)

// OutcomesHeader carries the per-item outcome counts of a batch response.
// One Cache-Status cannot describe a response whose items were served in
// different ways, so a batch states how many items were served each way
// instead: "hit_local=3, loaded=97" (flightcache.Outcome names, in the
// order of the Outcome values, zero counts left out).
const OutcomesHeader = "Flightcache-Outcomes"

// ListBody is the JSON body of a batch response. Products are the same
// objects the single GET returns, in the order of the ids asked; Missing
// are the ids that do not exist for this tenant, locale and currency. Both
// are arrays, never null.
type ListBody struct {
	Products []product.Product `json:"products"`
	Missing  []string          `json:"missing"`
}

// ParseSelection validates a batch request: the tenant path value and a
// query with ids (comma-separated, 1 to product.MaxBatchIDs of them, each
// validated like the single endpoint's id), and locale and currency as for
// ParseRef; any other parameter is refused. Repeated ids are asked once. Every error is a
// *product.InvalidError.
func ParseSelection(tenant, rawQuery string) (product.Selection, error) {
	q, err := parseQuery(rawQuery, "ids", "locale", "currency")
	if err != nil {
		return product.Selection{}, err
	}
	locale, currency := DefaultLocale, DefaultCurrency
	if v, ok := q["locale"]; ok {
		locale = v
	}
	if v, ok := q["currency"]; ok {
		currency = v
	}
	ids := q["ids"]
	if ids == "" {
		return product.Selection{}, &product.InvalidError{Field: "ids", Reason: "give ids=a,b,c"}
	}
	raw := strings.Split(ids, ",")
	if len(raw) > product.MaxBatchIDs {
		return product.Selection{}, &product.InvalidError{Field: "ids", Reason: fmt.Sprintf("at most %d ids", product.MaxBatchIDs)}
	}
	var sel product.Selection
	seen := make(map[string]bool, len(raw))
	for _, id := range raw {
		ref, err := product.NewRef(tenant, id, locale, currency)
		if err != nil {
			return product.Selection{}, err
		}
		if seen[ref.ID] {
			continue
		}
		seen[ref.ID] = true
		sel.Tenant, sel.Locale, sel.Currency = ref.Tenant, ref.Locale, ref.Currency
		sel.IDs = append(sel.IDs, ref.ID)
	}
	return sel, nil
}

// OutcomeCounts renders OutcomesHeader's value.
func OutcomeCounts(counts [driver.NumOutcomes]int) string {
	var sb strings.Builder
	for o, n := range counts {
		if n == 0 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(flightcache.Outcome(o).String())
		sb.WriteByte('=')
		sb.WriteString(strconv.Itoa(n))
	}
	return sb.String()
}

func (a *api) listProducts(w http.ResponseWriter, r *http.Request) {
	sel, err := ParseSelection(r.PathValue("tenant"), r.URL.RawQuery)
	if err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	out, err := a.Service.GetMany(r.Context(), sel)
	if h := OutcomeCounts(out.Outcomes); h != "" {
		w.Header().Set(OutcomesHeader, h)
	}
	if err != nil {
		a.fail(w, r, "product batch lookup failed", err)
		return
	}
	body := ListBody{Products: out.Products, Missing: out.Missing}
	if body.Products == nil {
		body.Products = []product.Product{}
	}
	if body.Missing == nil {
		body.Missing = []string{}
	}
	writeJSON(w, http.StatusOK, body)
}
