package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the reports as tables: one row per fault, the
// violations per invariant, the stale reads and the worst staleness; then
// up to examplesPerInvariant example violations per fault and invariant.
func WriteText(w io.Writer, reports []Report) error {
	var b strings.Builder
	for _, r := range reports {
		fmt.Fprintf(&b, "mode %s: bounds delivery %v, bus-down %v, recovery %v, read %v, write %v, fencing checked %v\n",
			r.Mode, r.Bounds.Delivery, r.Bounds.BusDown, r.Bounds.Recovery, r.Bounds.Read, r.Bounds.Write, r.Bounds.Fencing)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "fault\tops\terrors\t")
		for i := range numInvariants {
			fmt.Fprintf(tw, "%s\t", i)
		}
		fmt.Fprint(tw, "stale reads\tworst staleness\t\n")
		for _, row := range append(r.Rows, r.Total) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t", row.Fault, row.Ops, row.Errors)
			for _, n := range row.Violations {
				fmt.Fprintf(tw, "%d\t", n)
			}
			fmt.Fprintf(tw, "%d\t%v\t\n", row.Stale, row.WorstStaleness.Round(time.Millisecond))
		}
		tw.Flush()
		if n := r.Violations(); n > 0 {
			fmt.Fprintf(&b, "%d violations; examples:\n", n)
			for _, row := range r.Rows {
				for _, v := range row.Examples {
					fmt.Fprintf(&b, "  [%s] %s\n", row.Fault, v)
				}
			}
		} else {
			b.WriteString("no violations\n")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
