package product

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// ErrUnsupportedDSN is matched by ParseDSN's error for a database name that
// is none of the accepted forms.
var ErrUnsupportedDSN = errors.New("product: unsupported database name")

// AcceptedDSNForms lists the database names ParseDSN accepts, for error
// messages and usage text.
const AcceptedDSNForms = "a postgres:// or postgresql:// URL, or a SQLite file path ending in .db, .sqlite or .sqlite3 without '=' (bare or after sqlite: or file:)"

// DSN is a parsed database name: which database, and how to reach it.
type DSN struct {
	Dialect Dialect
	// Path is the SQLite file (without any sqlite: or file: prefix or
	// query); empty for PostgreSQL.
	Path string
	raw  string
}

// String returns the name with every credential redacted: safe to log.
// For PostgreSQL that is the URL with the password of its user info and the
// value of every query parameter not in safeDSNParams replaced by "xxxxx";
// for SQLite the file's path (ParseDSN admits no '=' in it, so it cannot
// carry a key=value secret).
func (d DSN) String() string {
	if d.Dialect == SQLite {
		return d.Path
	}
	return redactURL(d.raw, func(param string) bool { return !safeDSNParams[param] })
}

// redactURL returns the URL s with the password of its user info and the
// values of the query parameters secret says are secret replaced by "xxxxx".
// A URL whose user info cannot be told apart for sure shows only its
// scheme: a '#' anywhere, or an '@' after the host, means a password
// holding an unescaped '#', '/', '?' or '@' was cut short, its rest taken
// for the host, path, query or fragment.
func redactURL(s string, secret func(param string) bool) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparsable URL, redacted>"
	}
	if strings.ContainsRune(s, '#') || strings.ContainsRune(u.RawPath+u.Path+u.RawQuery, '@') {
		return u.Scheme + "://<redacted>"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if secret(k) {
				q[k] = []string{"xxxxx"}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// safeDSNParams are the PostgreSQL URL parameters whose values hold no
// secret and help an operator read a log; every other value is redacted.
var safeDSNParams = map[string]bool{"sslmode": true, "connect_timeout": true, "target_session_attrs": true}

// ParseDSN classifies a database name. It accepts only unambiguous forms
// (see AcceptedDSNForms): a libpq "key=value" string, a URL of another
// database, or a path without a SQLite extension is refused, so that a
// typo never creates and seeds a SQLite file named after a connection
// string. The error never echoes the name: it may hold a password.
func ParseDSN(s string) (DSN, error) {
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		if _, err := url.Parse(s); err != nil {
			return DSN{}, fmt.Errorf("%w: malformed postgres URL; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
		}
		if err := checkUserinfo(s); err != nil {
			return DSN{}, err
		}
		return DSN{Dialect: Postgres, raw: s}, nil
	case strings.HasPrefix(lower, "sqlite:"), strings.HasPrefix(lower, "file:"):
		path := s[strings.IndexByte(s, ':')+1:]
		path = strings.TrimPrefix(path, "//")
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		if path == "" {
			return DSN{}, fmt.Errorf("%w: the sqlite: URL names no file; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
		}
		if !sqlitePath(path) {
			return DSN{}, fmt.Errorf("%w: the sqlite: URL names no .db, .sqlite or .sqlite3 file; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
		}
		return DSN{Dialect: SQLite, Path: path, raw: s}, nil
	case strings.Contains(s, "://"):
		scheme := s[:strings.Index(s, "://")]
		if !schemeRE.MatchString(scheme) {
			scheme = "?"
		}
		return DSN{}, fmt.Errorf("%w: scheme %q is not supported; want %s", ErrUnsupportedDSN, scheme, AcceptedDSNForms)
	case schemePrefixRE.MatchString(s):
		// postgres:x.db, redis:…: a scheme without "//" is a mistyped URL,
		// not a file to create (a path with a colon can be written ./a:b.db).
		return DSN{}, fmt.Errorf("%w: it begins with a scheme but is no URL (missing \"//\"?); want %s", ErrUnsupportedDSN, AcceptedDSNForms)
	case keyValueRE.MatchString(s):
		return DSN{}, fmt.Errorf("%w: key=value connection strings are not supported; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
	case sqlitePath(s):
		return DSN{Dialect: SQLite, Path: s, raw: s}, nil
	}
	return DSN{}, fmt.Errorf("%w; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
}

// checkUserinfo refuses a URL whose user info cannot be told apart for
// sure: a '#' anywhere, or an '@' past the first one or after the host. A
// password holding '#', '@', '/' or '?' unescaped is cut there, and the
// driver's errors would then quote its rest as a host name.
func checkUserinfo(s string) error {
	_, rest, _ := strings.Cut(s, "://")
	if strings.ContainsRune(rest, '#') {
		return fmt.Errorf("%w: the URL holds a '#': a password holding one must write it %%23; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if strings.Count(authority, "@") > 1 || strings.ContainsRune(tail, '@') {
		return fmt.Errorf("%w: the URL holds a second '@', or one after its host: write an '@', '/' or '?' of a password as %%40, %%2F and %%3F, and an '@' of a parameter as %%40; want %s", ErrUnsupportedDSN, AcceptedDSNForms)
	}
	return nil
}

// sqlitePath reports whether path names a SQLite file unambiguously: it
// ends in .db, .sqlite or .sqlite3 and has no '=' (which would make a
// connection string, or a secret, into a file name).
func sqlitePath(path string) bool {
	if strings.ContainsRune(path, '=') {
		return false
	}
	lower := strings.ToLower(path)
	return strings.HasSuffix(lower, ".db") || strings.HasSuffix(lower, ".sqlite") || strings.HasSuffix(lower, ".sqlite3")
}

var (
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{0,20}$`)
	// schemePrefixRE matches a name that begins like a URL, "scheme:",
	// with a scheme of two letters or more (C:\… is a Windows path).
	schemePrefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{1,20}:`)
	// keyValueRE matches a libpq connection string: words followed by '='.
	keyValueRE = regexp.MustCompile(`(^|\s)[A-Za-z_]+\s*=`)
	// secretKVRE matches a credential in a key=value string or URL query.
	// A value runs to the next space, & or ;, with libpq's backslash
	// escapes (a password "a\ b" is one value).
	secretKVRE = regexp.MustCompile(`(?i)((?:^|[\s?&;])(?:password|passwd|pass|pwd|sslpassword|secret|token)\s*=\s*)('(?:\\.|[^'\\])*'|(?:\\.|[^\s&;\\])*)`)
)

// Redact returns s, a URL or connection string, with its credentials
// replaced by "xxxxx": the password of a URL's user info and the values of
// password-like parameters. A string it cannot parse as a URL keeps only
// what surely holds no secret.
func Redact(s string) string {
	if s == "" {
		return s
	}
	if strings.Contains(s, "://") {
		return redactURL(s, func(param string) bool { return secretKVRE.MatchString("?" + param + "=") })
	}
	return secretKVRE.ReplaceAllString(s, "${1}xxxxx")
}
