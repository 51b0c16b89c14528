package productd

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMistypedCommandLinesNeverPrintASecret runs the productd binary with
// command lines and environments an operator could get wrong: a value
// given to the wrong flag or variable, a flag's value cut off by a space,
// a password holding '#', '%', '@', '/' or '?' unescaped. Whatever
// productd says (the -h text, a flag error, a start-up error), no part of
// a password, token or key appears in it.
func TestMistypedCommandLinesNeverPrintASecret(t *testing.T) {
	t.Parallel()
	const (
		pw    = "S3cr3tHunter2"
		token = "S3cr3tHunter2-tok3n-0123456789"
		hex   = "5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5ec5"
	)
	// refused is a database and a Redis that refuse connections at once.
	const (
		refusedDB    = "@127.0.0.1:1/p?sslmode=disable&connect_timeout=5"
		refusedRedis = "@127.0.0.1:1/0"
	)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		secrets []string // substrings that must not appear; pw if empty
	}{
		// Wrong types: a value given to a number, duration, boolean or
		// float flag, or the next flag taken as the value of one.
		{name: "int flag", args: []string{"-db-max-conns", pw}},
		{name: "int flag swallows -db", args: []string{"-db-max-conns", "-db=postgres://app:" + pw + refusedDB}},
		{name: "duration flag", args: []string{"-cache-ttl=postgres://app:" + pw + "@db/p"}},
		{name: "float flag", args: []string{"-cache-jitter", pw}},
		{name: "bool flag", args: []string{"-seed=" + pw}},
		{name: "duration flag swallows -redis", args: []string{"-redis-timeout", "-redis=redis://:" + pw + refusedRedis}},
		{name: "int flag swallows -write-token", args: []string{"-max-tenants", "-write-token=" + token}, secrets: []string{token}},
		{name: "-mode", args: []string{"-mode", pw}},
		{name: "-log-level", args: []string{"-log-level", pw}},
		{name: "-writes", args: []string{"-writes", pw}},
		{name: "-coalesce", args: []string{"-coalesce", pw}},
		// Wrong types in the environment.
		{name: "PRODUCTD_DB_MAX_CONNS", env: map[string]string{"PRODUCTD_DB_MAX_CONNS": pw}},
		{name: "PRODUCTD_CACHE_TTL", env: map[string]string{"PRODUCTD_CACHE_TTL": "postgres://app:" + pw + "@db/p"}},
		{name: "PRODUCTD_SEED", env: map[string]string{"PRODUCTD_SEED": pw}},
		{name: "PRODUCTD_BLOOM_FP_RATE", env: map[string]string{"PRODUCTD_BLOOM_FP_RATE": pw}},
		// A secret in the wrong variable, shown by -h or refused.
		{name: "-h with PRODUCTD_ADDR", args: []string{"-h"}, env: map[string]string{"PRODUCTD_ADDR": "postgres://app:" + pw + "@db/p"}},
		{name: "PRODUCTD_ADDR", env: map[string]string{"PRODUCTD_ADDR": "postgres://app:" + pw + "@db/p"}},
		{name: "-h with PRODUCTD_REDIS_PREFIX", args: []string{"-h"}, env: map[string]string{"PRODUCTD_REDIS_PREFIX": "redis://:" + pw + "@cache:6379"}},
		{name: "-h with the token and key", args: []string{"-h"},
			env: map[string]string{"PRODUCTD_WRITE_TOKEN": token, "PRODUCTD_REDIS_ENTRY_KEY": hex}, secrets: []string{token, hex}},
		// Unknown flags and malformed ones.
		{name: "unknown flag", args: []string{"-dbb", "postgres://app:" + pw + "@db/p"}},
		{name: "URL as a flag", args: []string{"-postgres://app:" + pw + "@db/p"}},
		{name: "bad flag syntax", args: []string{"-=" + pw}},
		{name: "stray argument", args: []string{"--", pw}},
		{name: "unquoted space in a password", args: []string{"-db", "postgres://app:S3cr3t", "Hunter2@db/p"}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "stray URL with a #", args: []string{"-db=", "postgres://app:12#" + pw + "@db/p"}},
		// Passwords with '#', '%', '@', '/' or '?' under -h.
		{name: "-h with a # in the -db password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_DB": "postgres://app:12#" + pw + "@db:5432/p"}},
		{name: "-h with a # mid -db password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_DB": "postgres://app:S3cr3t#Hunter2@db:5432/p"}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-h with a % in the -db password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_DB": "postgres://app:S3cr3t%zzHunter2@db/p"}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-h with an @ in the -db password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_DB": "postgres://app:S3cr3t@Hunter2@db/p"}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-h with a / in the -db password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_DB": "postgres://app:12/" + pw + "@db/p"}},
		{name: "-h with a ? in the -db password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_DB": "postgres://app:12?" + pw + "@db/p"}},
		{name: "-h with a # in the -redis password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_REDIS": "redis://:12#" + pw + "@cache:6379/0"}},
		{name: "-h with a / in the -redis password", args: []string{"-h"}, env: map[string]string{"PRODUCTD_REDIS": "redis://:12/" + pw + "@cache:6379/0"}},
		// The same at start-up, against servers that refuse.
		{name: "-db with a #", args: []string{"-db", "postgres://app:12#" + pw + refusedDB}},
		{name: "-db with a %", args: []string{"-db", "postgres://app:S3cr3t%zzHunter2" + refusedDB}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-db with an @", args: []string{"-db", "postgres://app:S3cr3t@Hunter2" + refusedDB}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-db with a password parameter", args: []string{"-db", "postgres://app" + refusedDB + "&password=" + pw}},
		{name: "-redis with a #", args: []string{"-redis", "redis://:S3cr3t#Hunter2" + refusedRedis}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-redis with an @", args: []string{"-redis", "redis://:S3cr3t@Hunter2" + refusedRedis}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-redis with a %", args: []string{"-redis", "redis://:S3cr3t%zzHunter2" + refusedRedis}, secrets: []string{"S3cr3t", "Hunter2"}},
		{name: "-redis sentinel password", args: []string{"-redis", "redis+sentinel://127.0.0.1:1/m?sentinel_password=" + pw}},
		// A token or key given to the flag of its file, or refused.
		{name: "token as -write-token-file", args: []string{"-write-token-file", token}, env: map[string]string{"PRODUCTD_WRITE_TOKEN": ""}, secrets: []string{token}},
		{name: "short -write-token", args: []string{"-write-token", pw}, env: map[string]string{"PRODUCTD_WRITE_TOKEN": ""}},
		{name: "token with -writes open", args: []string{"-writes", "open", "-write-token", token}, env: map[string]string{"PRODUCTD_WRITE_TOKEN": ""}, secrets: []string{token}},
		{name: "key as -redis-entry-key-file", args: []string{"-redis", "redis://127.0.0.1:1/0", "-redis-entry-key-file", hex}, secrets: []string{hex}},
		{name: "-redis-entry-key not hex", args: []string{"-redis", "redis://127.0.0.1:1/0", "-redis-entry-key", pw + pw + pw}},
	}
	bin := productdBinary(t)
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PRODUCTD_") })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Dir = t.TempDir() // the default SQLite file, if one were made, goes here
			cmd.Env = append(slices.Clone(base), "PRODUCTD_WRITE_TOKEN="+testWriteToken)
			for k, v := range tc.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("productd %q did not exit within 60s; it printed:\n%s", tc.args, out)
			}
			help := slices.Contains(tc.args, "-h")
			switch {
			case help && err != nil:
				t.Fatalf("productd %q: %v\n%s", tc.args, err, out)
			case !help && err == nil:
				t.Fatalf("productd %q succeeded:\n%s", tc.args, out)
			case !help && !strings.Contains(string(out), "productd") && !strings.Contains(string(out), "error"):
				t.Fatalf("productd %q failed without saying why:\n%s", tc.args, out)
			}
			secrets := tc.secrets
			if len(secrets) == 0 {
				secrets = []string{pw}
			}
			for _, s := range secrets {
				if strings.Contains(string(out), s) {
					t.Fatalf("productd %q (env %v) printed the secret %q:\n%s", tc.args, tc.env, s, out)
				}
			}
		})
	}
}
