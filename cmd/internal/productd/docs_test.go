package productd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../../.."

// productdFlags returns the names of productd's flags, read from its own
// -h: whatever flag is added to ParseFlags is in the list.
func productdFlags(t *testing.T) []string {
	t.Helper()
	var out bytes.Buffer
	if _, err := ParseFlags([]string{"-h"}, func(string) string { return "" }, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseFlags(-h) = %v, want flag.ErrHelp", err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		names = append(names, m[1])
	}
	if len(names) < 30 {
		t.Fatalf("only %d flags found in -h:\n%s", len(names), out.String())
	}
	return names
}

// flagTable returns the flags named in the first column of file's table of
// productd's flags: the table (lines starting with "|") that has a row for
// -addr, whose rows start "| `-name` | `PRODUCTD_NAME` |". Other tables
// (the demo's flags) are not it. A row whose variable is not the flag's
// fails t.
func flagTable(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `-([a-z0-9-]+)` \\| `?([A-Z0-9_]*)`? \\|")
	var table []string
	for _, block := range strings.Split(string(b), "\n\n") {
		if !strings.Contains(block, "\n| `-addr` |") {
			continue
		}
		if table != nil {
			t.Fatalf("%s: two tables have a row for -addr", file)
		}
		table = []string{}
		for _, line := range strings.Split(block, "\n") {
			if m := row.FindStringSubmatch(line); m != nil {
				table = append(table, m[1])
				if env := envPrefix + strings.ToUpper(strings.ReplaceAll(m[1], "-", "_")); m[2] != env {
					t.Errorf("%s: -%s's variable is %q, want %s", file, m[1], m[2], env)
				}
			}
		}
	}
	if table == nil {
		t.Fatalf("%s: no flag table (no row for -addr)", file)
	}
	return table
}

// Every flag productd has is in the README's flag table (which says it
// lists them all) and in docs/productd.md's, and neither table lists a flag
// productd does not have.
func TestEveryFlagIsInTheDocsFlagTables(t *testing.T) {
	flags := productdFlags(t)
	for _, file := range []string{"README.md", "docs/productd.md"} {
		table := flagTable(t, file)
		for _, f := range flags {
			if !slices.Contains(table, f) {
				t.Errorf("%s: the flag table lacks -%s", file, f)
			}
		}
		for _, f := range table {
			if !slices.Contains(flags, f) {
				t.Errorf("%s: the flag table lists -%s, which productd does not have", file, f)
			}
		}
	}
}

// Every test docs/RELIABILITY.md names as the proof of a promise exists:
// a func of that name in a _test.go file of the repository.
func TestEveryTestNamedInReliabilityExists(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/RELIABILITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	// A name that ends in "…" (a family of tests) must start some test's
	// name.
	named := map[string]bool{} // name -> a prefix only
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)(…?)[^`]*`").FindAllSubmatch(doc, -1) {
		named[string(m[1])] = len(m[2]) > 0
	}
	if len(named) < 50 {
		t.Fatalf("only %d test names found in docs/RELIABILITY.md", len(named))
	}
	defined := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcs.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, prefix := range named {
		found := defined[name]
		for d := range defined {
			found = found || prefix && strings.HasPrefix(d, name)
		}
		if !found {
			t.Errorf("docs/RELIABILITY.md names %s, which no _test.go file defines", name)
		}
	}
}

// logKeys returns the keys of a log line in slog's text format, in order,
// without time, level and msg.
func logKeys(line string) []string {
	var keys []string
	for _, m := range regexp.MustCompile(`(?:^| )([a-z_]+)=`).FindAllStringSubmatch(line, -1) {
		if k := m[1]; k != "time" && k != "level" && k != "msg" {
			keys = append(keys, k)
		}
	}
	return keys
}

// The start-up line docs/productd.md shows (productd with -redis) has the
// fields productd logs at start-up with -redis, no more and no fewer.
func TestStartupLineInTheDocsHasEveryField(t *testing.T) {
	t.Parallel()
	addr := testenv.RequireRedis(t)
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/productd.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile(`(?m)^level=INFO msg="productd listening" .*$`).Find(doc)
	if documented == nil {
		t.Fatal(`docs/productd.md shows no "productd listening" line`)
	}

	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = "redis://" + addr + "/0"
	cfg.RedisPrefix = testenv.UniqueName("productd-test-") + ":"
	cfg.RedisTimeout = sharedTimeoutUnderLoad
	t.Cleanup(func() {
		cleanRedisPrefix(t, addr, cfg.RedisPrefix)
	})
	var logs syncBuffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, s)
	// Serve logs the line before it serves: once /healthz answers, the
	// line is written.
	c := herdClient(1)
	defer c.CloseIdleConnections()
	resp, err := c.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logged := regexp.MustCompile(`(?m)^.* msg="productd listening" .*$`).FindString(logs.String())
	if logged == "" {
		t.Fatalf("no \"productd listening\" line:\n%s", logs.String())
	}
	if got, want := logKeys(string(documented)), logKeys(logged); !slices.Equal(got, want) {
		t.Errorf("docs/productd.md's start-up line has the fields\n%v\nproductd logs\n%v\n(%s)", got, want, logged)
	}
}
