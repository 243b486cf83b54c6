#!/usr/bin/env bash
# Logical backup and restore of a gpumeter database with clickhouse-client,
# in ClickHouse's Native format: it works on every server version gpumeter
# supports, across versions, and on a cluster (it reads and writes through
# the Distributed tables). docs/operations.md, "Backup and restore".
#
#   scripts/backup.sh dump DIR      write every table to DIR (TABLE.native
#                                   plus TABLE.columns, the column list)
#   scripts/backup.sh restore DIR   insert a dump into a database migrated
#                                   with `gpumeter migrate` (same or newer)
#
# Environment: CH_HOST (127.0.0.1), CH_PORT (9000), CH_DATABASE (gpumeter),
# CH_USER (default), CH_PASSWORD (empty), CH_CLIENT (clickhouse-client, or
# `clickhouse client` when only the single binary exists).
#
# Restoring over data that is still there counts nothing twice where the
# table deduplicates (ReplacingMergeTree: samples by sample_id, rollups,
# invoices and keys by version or revision). The two plain MergeTree logs
# (api_audit, webhook_attempts) have no key to deduplicate on, so they are
# restored only into an empty table, and skipped with a warning otherwise.
set -euo pipefail

host=${CH_HOST:-127.0.0.1}
port=${CH_PORT:-9000}
db=${CH_DATABASE:-gpumeter}
user=${CH_USER:-default}

log() { printf 'backup.sh: %s\n' "$*" >&2; }

client() {
	local args=(--host "$host" --port "$port" --user "$user" --database "$db")
	[ -n "${CH_PASSWORD:-}" ] && args+=(--password "$CH_PASSWORD")
	if [ -n "${CH_CLIENT:-}" ]; then
		# shellcheck disable=SC2086 # CH_CLIENT may be "clickhouse client"
		$CH_CLIENT "${args[@]}" "$@"
	elif command -v clickhouse-client >/dev/null 2>&1; then
		clickhouse-client "${args[@]}" "$@"
	else
		clickhouse client "${args[@]}" "$@"
	fi
}

# tables lists what to back up: every table but the shard-local parts of a
# cluster (their rows are read through the Distributed tables).
tables() {
	client -q "SELECT name FROM system.tables WHERE database = currentDatabase()
		AND name NOT LIKE '%\\_local' AND engine NOT IN ('View', 'MaterializedView') ORDER BY name"
}

# columns lists a table's stored columns in order (DESCRIBE keeps the
# order on every version; MATERIALIZED and ALIAS columns are computed, not
# inserted).
columns() {
	local out
	out=$(client -q "DESCRIBE TABLE $1 FORMAT TSV") || return 1
	awk -F'\t' '$3 == "" || $3 == "DEFAULT" { print $1 }' <<<"$out" | paste -sd, -
}

dump() {
	local dir=$1 t n
	mkdir -p "$dir"
	local list
	list=$(tables)
	for t in $list; do
		columns "$t" >"$dir/$t.columns"
		client -q "SELECT $(cat "$dir/$t.columns") FROM $t FORMAT Native" >"$dir/$t.native"
		n=$(client -q "SELECT count() FROM $t")
		log "dumped $t: $n rows"
	done
}

restore() {
	local dir=$1 f t cols have
	[ -d "$dir" ] || { log "no dump at $dir"; exit 2; }
	for f in "$dir"/*.columns; do
		[ -e "$f" ] || { log "no tables in $dir"; exit 2; }
		t=$(basename "$f" .columns)
		cols=$(cat "$f")
		have=$(client -q "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = '$t'")
		if [ "$have" != 1 ]; then
			log "table $t is not in $db: run gpumeter migrate first (or a gpumeter version that knows it)"
			exit 1
		fi
		if [ ! -s "$dir/$t.native" ]; then
			log "$t: empty in the dump"
			continue
		fi
		case "$t" in
		api_audit | webhook_attempts)
			if [ "$(client -q "SELECT count() FROM $t")" != 0 ]; then
				log "skipping $t: it already holds rows and cannot deduplicate a second copy"
				continue
			fi
			;;
		esac
		# A cluster's Distributed tables must acknowledge only what every
		# shard wrote, as the store's own inserts do.
		client --insert_distributed_sync=1 -q "INSERT INTO $t ($cols) FORMAT Native" <"$dir/$t.native"
		log "restored $t"
	done
}

case "${1:-}" in
dump) [ $# -eq 2 ] || { echo "usage: $0 dump DIR" >&2; exit 2; }; dump "$2" ;;
restore) [ $# -eq 2 ] || { echo "usage: $0 restore DIR" >&2; exit 2; }; restore "$2" ;;
*) echo "usage: $0 dump|restore DIR" >&2; exit 2 ;;
esac
