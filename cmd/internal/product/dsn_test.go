package product

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDSNAcceptsOnlyUnambiguousForms(t *testing.T) {
	tests := []struct {
		in      string
		dialect Dialect
		path    string
	}{
		{"postgres://u:pw@127.0.0.1/db?sslmode=disable", Postgres, ""},
		{"postgresql://127.0.0.1/db", Postgres, ""},
		{"sqlite:products.db", SQLite, "products.db"},
		{"sqlite:///var/lib/productd/p.db", SQLite, "/var/lib/productd/p.db"},
		{"file:/tmp/p.sqlite?mode=rwc", SQLite, "/tmp/p.sqlite"},
		{"products.db", SQLite, "products.db"},
		{"/var/lib/productd/catalog.sqlite", SQLite, "/var/lib/productd/catalog.sqlite"},
		{"catalog.SQLITE3", SQLite, "catalog.SQLITE3"},
		{"file:catalog.sqlite3?_pragma=busy_timeout(5000)", SQLite, "catalog.sqlite3"},
		{"./a:b.db", SQLite, "./a:b.db"},
		{`C:\data\p.db`, SQLite, `C:\data\p.db`},
	}
	for _, tc := range tests {
		d, err := ParseDSN(tc.in)
		if err != nil || d.Dialect != tc.dialect || d.Path != tc.path {
			t.Errorf("ParseDSN(%q) = %+v, %v; want %s %q", tc.in, d, err, tc.dialect, tc.path)
		}
	}
}

func TestParseDSNRefusesAmbiguousNamesWithoutEchoingThem(t *testing.T) {
	for _, in := range []string{
		"host=db.internal user=app password=hunter2 dbname=products",
		"host=db password=hunter2 dbname=p.db",
		"mysql://app:hunter2@db/products",
		"redis://:hunter2@127.0.0.1:6379",
		"products",
		"products.txt",
		"sqlite:",
		"file:password=hunter2d",
		"sqlite:password=hunter2",
		"file:password=hunter2.db",
		"file:/tmp/products",
		"sqlite:///var/lib/productd/catalog.txt",
		"dir/password=hunter2.db",
		"postgres:x.db",
		"postgresql:hunter2@db/p.db",
		"redis:hunter2.sqlite",
		// Passwords with an unescaped '#', '@', '/' or '?': the driver
		// would take their rest for the host and quote it.
		"postgres://app:hun@ter2@db/p",
		"postgres://app:12#hunter2@db/p",
		"postgres://app:12/hunter2@db/p",
		"postgres://app:12?hunter2@db/p",
	} {
		_, err := ParseDSN(in)
		if !errors.Is(err, ErrUnsupportedDSN) {
			t.Errorf("ParseDSN(%q) = %v, want ErrUnsupportedDSN", in, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "db.internal") {
			t.Errorf("ParseDSN(%q) error echoes the input: %v", in, err)
		}
		if !strings.Contains(err.Error(), AcceptedDSNForms) {
			t.Errorf("ParseDSN(%q) error does not list the accepted forms: %v", in, err)
		}
	}
}

func TestRedactHidesEveryCredential(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://app:hunter2@db:5432/p?sslmode=disable", "postgres://app:xxxxx@db:5432/p?sslmode=disable"},
		{"postgres://app@db/p?password=hunter2", "postgres://app@db/p?password=xxxxx"},
		{"redis://:hunter2@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"rediss://default:hunter2@cache:6380/0", "rediss://default:xxxxx@cache:6380/0"},
		{"host=db password=hunter2 dbname=p", "host=db password=xxxxx dbname=p"},
		{"host=db password='hunter 2' dbname=p", "host=db password=xxxxx dbname=p"},
		{`host=db password=hun\ ter2 dbname=p`, "host=db password=xxxxx dbname=p"},
		{`host=db password='hun\'ter2' dbname=p`, "host=db password=xxxxx dbname=p"},
		{"postgres://app:hun#ter2@db/p", "<unparsable URL, redacted>"},
		// A password with an unescaped '#', '/' or '?' after digits parses
		// as a port followed by a fragment, path or query.
		{"postgres://app:12#hunter2@db:5432/p", "postgres://<redacted>"},
		{"postgres://app:12/hunter2@db:5432/p", "postgres://<redacted>"},
		{"postgres://app:12?hunter2@db:5432/p", "postgres://<redacted>"},
		{"postgres://app@db/p#hunter2", "postgres://<redacted>"},
		{"products.db", "products.db"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Redact("postgres://app:hunter2@db:99999999x/p"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact of a malformed URL leaks: %q", got)
	}
}

// DSN.String is what productd logs: no password, in user info or in any
// query parameter, survives it.
func TestDSNStringNeverShowsASecret(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://app:hunter2@db:5432/p?sslmode=disable", "postgres://app:xxxxx@db:5432/p?sslmode=disable"},
		{"postgres://app@db/p?password=hunter2&sslmode=require", "postgres://app@db/p?password=xxxxx&sslmode=require"},
		{"postgresql://db/p?sslkey=/k&options=-c%20x%3Dhunter2&sslpassword=hunter2", "postgresql://db/p?options=xxxxx&sslkey=xxxxx&sslpassword=xxxxx"},
		{"file:/tmp/p.sqlite?mode=rwc&_auth_pass=hunter2", "/tmp/p.sqlite"},
		{"products.db", "products.db"},
	}
	for _, tc := range tests {
		d, err := ParseDSN(tc.in)
		if err != nil {
			t.Errorf("ParseDSN(%q): %v", tc.in, err)
			continue
		}
		if got := d.String(); got != tc.want || strings.Contains(got, "hunter2") {
			t.Errorf("ParseDSN(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
	}
}
