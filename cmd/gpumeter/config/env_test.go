package config

import "testing"

func TestFromEnv(t *testing.T) {
	env := map[string]string{"GPUMETER_CONFIG": "/etc/gpumeter.yaml", "GPUMETER_CLICKHOUSE": "clickhouse://ch:9000/gpumeter", "OTHER": "x"}
	got := FromEnv(func(k string) string { return env[k] })
	want := Env{ConfigPath: "/etc/gpumeter.yaml", ClickHouse: "clickhouse://ch:9000/gpumeter"}
	if got != want {
		t.Fatalf("FromEnv = %+v, want %+v", got, want)
	}
}
