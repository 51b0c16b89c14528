package productd

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
)

// The values of Config.Writes (-writes).
const (
	// WritesToken: a write must carry Config.WriteToken as a bearer token.
	WritesToken = "token"
	// WritesOpen: anyone who reaches the port may write. productd logs a
	// warning saying so at every start.
	WritesOpen = "open"
	// WritesDisabled: every write is refused with 403; reads work.
	WritesDisabled = "disabled"
)

// Defaults of the caps on what creates may add (see Config). A full cap,
// DefaultMaxTenants new tenants of DefaultMaxCreatesPerTenant rows each,
// is a million rows: about 150 MB of PostgreSQL (table and primary key;
// 820 MB with every field at its longest), and one recent-creations set
// per tenant in Redis, which holds the creates of its last 21 minutes
// (measured in docs/productd.md, "Writes").
const (
	DefaultMaxTenants          = 1000
	DefaultMaxCreatesPerTenant = 1000
)

// Bounds of a write token: long enough not to be guessed, short enough for
// a header, and printable ASCII without spaces so that it survives a
// header, a file and an environment variable unchanged.
const (
	minWriteToken = 16
	maxWriteToken = 4096
)

// validateWrites reports the first write setting out of range or
// contradicting another. It never reads the token file (New does), and
// its messages never hold the token.
func (c Config) validateWrites() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("productd: "+format, a...) }
	hasToken := c.WriteToken != "" || c.WriteTokenFile != ""
	switch {
	case c.Writes != WritesToken && c.Writes != WritesOpen && c.Writes != WritesDisabled:
		return bad("-writes must be token, open or disabled")
	case c.WriteToken != "" && c.WriteTokenFile != "":
		return bad("-write-token and -write-token-file are both set (a flag or its PRODUCTD_ variable): set only one")
	case c.Writes == WritesToken && !hasToken:
		return bad("writes need a bearer token: set -write-token-file (or -write-token, or PRODUCTD_WRITE_TOKEN); " +
			"or start with -writes disabled for a read-only instance, or -writes open to let anyone who reaches the port write")
	case c.Writes == WritesOpen && hasToken:
		return bad("-writes open lets anyone write, so the write token set would be ignored: drop it, or use -writes token")
	case c.Writes == WritesDisabled && hasToken:
		return bad("-writes disabled refuses every write, so the write token set would be ignored: drop it, or use -writes token")
	case c.MaxTenants < 0:
		return bad("-max-tenants must not be negative (0: unlimited)")
	case c.MaxCreatesPerTenant < 0:
		return bad("-max-creates-per-tenant must not be negative (0: unlimited)")
	}
	if c.WriteToken != "" {
		if err := checkWriteToken(c.WriteToken); err != nil {
			return fmt.Errorf("productd: -write-token: %w", err)
		}
	}
	return nil
}

// checkWriteToken refuses a token that is too short or too long, or holds
// anything but printable ASCII without spaces. It never quotes the token.
func checkWriteToken(tok string) error {
	if len(tok) < minWriteToken || len(tok) > maxWriteToken {
		return fmt.Errorf("the token must be %d to %d characters long (it has %d)", minWriteToken, maxWriteToken, len(tok))
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return fmt.Errorf("the token must be printable ASCII without spaces (character %d is not)", i+1)
		}
	}
	return nil
}

// maxTokenFile bounds how much of -write-token-file is read.
const maxTokenFile = 64 << 10

// maxWriteTokens is how many tokens -write-token-file may hold: the one in
// use and the next, while clients switch to it (see docs/productd.md,
// "Rotating the write token").
const maxWriteTokens = 2

// readWriteTokens returns the tokens of the file path: its first line,
// trimmed, and any later line that is neither blank nor a comment ('#'),
// at most maxWriteTokens in all. A token file written by hand or by a
// secret store ends with a newline or not. An empty first line is
// refused, and so is a file that users other than its owner may read or
// write (as ssh refuses such a private key).
func readWriteTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("productd: -write-token-file: cannot open the file it names: %w", pathless(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("productd: -write-token-file %s: %w", path, pathless(err))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("productd: -write-token-file %s may be read or written by users other than its owner (mode %04o): "+
			"anyone on the host who can read it can write products; run chmod 600 on it (or give the secret mount mode 0400)", path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile))
	if err != nil {
		return nil, fmt.Errorf("productd: -write-token-file %s: %w", path, err)
	}
	lines := strings.Split(string(data), "\n")
	if strings.TrimSpace(lines[0]) == "" {
		return nil, fmt.Errorf("productd: -write-token-file %s: the first line is empty; write the token there", path)
	}
	var toks []string
	for n, line := range lines {
		tok := strings.TrimSpace(line)
		if n > 0 && (tok == "" || strings.HasPrefix(tok, "#")) {
			continue
		}
		if err := checkWriteToken(tok); err != nil {
			return nil, fmt.Errorf("productd: -write-token-file %s: line %d: %w", path, n+1, err)
		}
		toks = append(toks, tok)
	}
	if len(toks) > maxWriteTokens {
		return nil, fmt.Errorf("productd: -write-token-file %s holds %d tokens; at most %d: the token in use and, while clients switch, the next", path, len(toks), maxWriteTokens)
	}
	return toks, nil
}

// writeAuth decides whether a write may go on: httpapi.Options.AuthorizeWrite.
type writeAuth struct {
	mode string
	// file is -write-token-file, which reload reads again; "" when the
	// token came from -write-token.
	file string
	// digests are the SHA-256 of the tokens accepted (WritesToken only):
	// the presented token is hashed too, so that the comparison takes the
	// same time whatever the presented token's length and content. reload
	// replaces them at once.
	digests atomic.Pointer[[][sha256.Size]byte]
}

// newWriteAuth builds the write gate cfg asks for, reading the token file
// if one is set, and logs the write mode: a warning with WritesOpen.
func newWriteAuth(ctx context.Context, cfg Config, log *slog.Logger) (*writeAuth, error) {
	a := &writeAuth{mode: cfg.Writes, file: cfg.WriteTokenFile}
	switch cfg.Writes {
	case WritesOpen:
		log.LogAttrs(ctx, slog.LevelWarn, "writes are open: anyone who can reach this port can create and change products (-writes open); "+
			"use -writes token with -write-token-file, or -writes disabled",
			slog.String("writes", WritesOpen))
	case WritesDisabled:
		log.LogAttrs(ctx, slog.LevelInfo, "writes are disabled: every PUT and POST is answered 403 (-writes disabled)",
			slog.String("writes", WritesDisabled))
	default:
		toks := []string{cfg.WriteToken}
		if a.file != "" {
			var err error
			if toks, err = readWriteTokens(a.file); err != nil {
				return nil, err
			}
		}
		if toks[0] == "" { // Validate refuses this; a gate without a token must never open
			return nil, errors.New("productd: -writes token without a write token")
		}
		a.set(toks)
	}
	return a, nil
}

func (a *writeAuth) set(toks []string) {
	d := make([][sha256.Size]byte, len(toks))
	for i, t := range toks {
		d[i] = sha256.Sum256([]byte(t))
	}
	a.digests.Store(&d)
}

// reload reads -write-token-file again and accepts its tokens from now
// on. It returns how many there are; on an error (the file missing,
// malformed or open to other users) the tokens accepted so far stay.
// Without a token file it does nothing and returns 0, nil.
func (a *writeAuth) reload() (int, error) {
	if a.mode != WritesToken || a.file == "" {
		return 0, nil
	}
	toks, err := readWriteTokens(a.file)
	if err != nil {
		return 0, err
	}
	a.set(toks)
	return len(toks), nil
}

// authorize is httpapi.Options.AuthorizeWrite. It never logs, and never
// returns anything derived from the presented token.
func (a *writeAuth) authorize(r *http.Request) error {
	switch a.mode {
	case WritesOpen:
		return nil
	case WritesDisabled:
		return httpapi.ErrWritesDisabled
	}
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return httpapi.ErrUnauthorized
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return httpapi.ErrUnauthorized
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for _, d := range *a.digests.Load() {
		match |= subtle.ConstantTimeCompare(got[:], d[:])
	}
	if match != 1 {
		return httpapi.ErrUnauthorized
	}
	return nil
}

// pathless is err without the path a *fs.PathError names: an error about
// a file that could not be opened, when the name given may be the secret
// itself (a token or key given to the flag of its file).
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w (its name is not shown, in case a credential was given in place of a file name)", pe.Op, pe.Err)
	}
	return err
}
