package productd

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/flightcache/flightcache/redisstore"
)

// EntryKeys returns the entry-authentication keys of the shared tier
// (redisstore.Options.EntryKeys): RedisEntryKey, or every key of
// RedisEntryKeyFile in file order, or none when neither is set. A key file
// holds one key a line in hex, at least redisstore.MinEntryKeyLen bytes
// (32 hex digits); blank lines and lines starting with # are skipped. The
// first key signs, every key verifies: to rotate, put a new key first and
// remove the old one once every entry written with it has expired
// (-cache-ttl plus -stale-for after the first instance signs with the new
// key). Errors name the flag and the line, never a key or any part of one.
func (c Config) EntryKeys() ([][]byte, error) {
	switch {
	case c.RedisEntryKey != "":
		k, err := parseEntryKey(c.RedisEntryKey)
		if err != nil {
			return nil, fmt.Errorf("productd: -redis-entry-key: %w", err)
		}
		return [][]byte{k}, nil
	case c.RedisEntryKeyFile != "":
		data, err := os.ReadFile(c.RedisEntryKeyFile)
		if err != nil {
			// The reason, not the path (pathless); the content is not read.
			return nil, fmt.Errorf("productd: -redis-entry-key-file: %w", pathless(err))
		}
		var keys [][]byte
		for n, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, err := parseEntryKey(line)
			if err != nil {
				return nil, fmt.Errorf("productd: -redis-entry-key-file %s: line %d: %w", c.RedisEntryKeyFile, n+1, err)
			}
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("productd: -redis-entry-key-file %s holds no key", c.RedisEntryKeyFile)
		}
		return keys, nil
	}
	return nil, nil
}

// The errors of parseEntryKey: fixed texts, since hex.DecodeString's own
// errors quote the offending character of the key.
var (
	errEntryKeyNotHex = errors.New("a key must be written in hex (e.g. the output of openssl rand -hex 32)")
	errEntryKeyShort  = fmt.Errorf("a key must be at least %d bytes (%d hex digits)", redisstore.MinEntryKeyLen, 2*redisstore.MinEntryKeyLen)
)

func parseEntryKey(s string) ([]byte, error) {
	k, err := hex.DecodeString(s)
	switch {
	case err != nil:
		return nil, errEntryKeyNotHex
	case len(k) < redisstore.MinEntryKeyLen:
		return nil, errEntryKeyShort
	}
	return k, nil
}

// validateEntryKeys is Validate's part for the entry-key flags: at most one
// of them, only with -redis, and keys that parse.
func (c Config) validateEntryKeys() error {
	if c.RedisEntryKey == "" && c.RedisEntryKeyFile == "" {
		return nil
	}
	switch {
	case c.RedisEntryKey != "" && c.RedisEntryKeyFile != "":
		return errors.New("productd: set -redis-entry-key or -redis-entry-key-file, not both")
	case c.Redis == "":
		return errors.New("productd: -redis-entry-key and -redis-entry-key-file authenticate the entries of the shared tier and need -redis")
	}
	_, err := c.EntryKeys()
	return err
}
