package store

import (
	"strings"
	"testing"
	"time"
)

func TestParseDSN(t *testing.T) {
	cases := []struct {
		name    string
		dsn     string
		want    func(Config) bool
		wantErr string
	}{
		{name: "defaults fill what the dsn omits", dsn: "clickhouse://127.0.0.1:9000",
			want: func(c Config) bool {
				return c.Database == "default" && c.Username == "default" && c.Compress && c.Addrs[0] == "127.0.0.1:9000"
			}},
		{name: "user, password, database and parameters", dsn: "clickhouse://bob:s3cret@ch1:9440,ch2:9440/metering?secure=true&max_open_conns=20&max_idle_conns=5&dial_timeout=2s&query_timeout=30s&compress=none",
			want: func(c Config) bool {
				return c.Username == "bob" && c.Password == "s3cret" && c.Database == "metering" && c.TLS &&
					len(c.Addrs) == 2 && c.Addrs[1] == "ch2:9440" && c.MaxOpenConns == 20 && c.MaxIdleConns == 5 &&
					c.DialTimeout == 2*time.Second && c.QueryTimeout == 30*time.Second && !c.Compress
			}},
		{name: "host without port gets the native port", dsn: "clickhouse://ch1/db",
			want: func(c Config) bool { return c.Addrs[0] == "ch1:9000" }},
		{name: "http scheme refused", dsn: "http://127.0.0.1:8123", wantErr: "want clickhouse://"},
		{name: "unknown parameter refused", dsn: "clickhouse://h:9000?compres=lz4", wantErr: "unknown parameter"},
		{name: "bad duration", dsn: "clickhouse://h:9000?dial_timeout=soon", wantErr: "dial_timeout"},
		{name: "database with a quote refused", dsn: "clickhouse://h:9000/a'b", wantErr: "database"},
		{name: "idle above open refused", dsn: "clickhouse://h:9000?max_open_conns=2&max_idle_conns=3", wantErr: "max_idle_conns"},
		{name: "missing host", dsn: "clickhouse:///db", wantErr: "missing host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseDSN(tc.dsn)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseDSN(%q) error = %v, want it to mention %q", tc.dsn, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", tc.dsn, err)
			}
			if !tc.want(cfg) {
				t.Fatalf("ParseDSN(%q) = %+v", tc.dsn, cfg)
			}
		})
	}
}

func TestParseDSNErrorsNeverShowPassword(t *testing.T) {
	_, err := ParseDSN("clickhouse://bob:hunter2@h:9000?bogus=1")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v: want an error without the password", err)
	}
	cfg, err := ParseDSN("clickhouse://bob:hunter2@h:9000")
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Password.String(); strings.Contains(s, "hunter2") {
		t.Fatalf("Secret.String() = %q", s)
	}
}

func TestParseVersion(t *testing.T) {
	v, err := ParseVersion("18.16.1")
	if err != nil || v != (Version{18, 16, 1}) {
		t.Fatalf("ParseVersion = %v, %v", v, err)
	}
	w, err := ParseVersion("24.3.2.23")
	if err != nil || !v.Less(w) || w.Less(v) {
		t.Fatalf("ordering of %v and %v wrong (%v)", v, w, err)
	}
	if _, err := ParseVersion("x.y"); err == nil {
		t.Fatal("ParseVersion(x.y) accepted")
	}
}
