#!/usr/bin/env bash
# chDB (ClickHouse 26.x as a library) for the check that runs every migration
# and the store's statements on it beside the 18.16 server
# (internal/chdbcheck, issue 15 part 3).
#
#   scripts/chdb.sh fetch   put libchdb.so in .data/chdb/ unless it is there,
#                           from the npm package @chdb/lib-linux-x64-gnu
#                           (~170 MB download, 560 MB unpacked; only
#                           libchdb.so is kept), and print its path
#
# CHDB_VERSION picks the npm version. chdb-go loads the library at run time
# (purego, no cgo link) from CHDB_LIB_PATH, which `make chdb-test` sets to the
# printed path. A failed fetch exits 1; in CI (CI=true) the caller fails on
# it, elsewhere it skips the check with a warning.
set -euo pipefail

CHDB_VERSION="${CHDB_VERSION:-26.5.3}"
dir="$(cd "$(dirname "$0")/.." && pwd)/.data/chdb"
lib="$dir/libchdb-$CHDB_VERSION.so"

log() { printf 'chdb.sh: %s\n' "$*" >&2; }

case "${1:-}" in
fetch)
	if [ -s "$lib" ]; then
		echo "$lib"
		exit 0
	fi
	if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
		log "@chdb/lib-linux-x64-gnu is for Linux x86_64 only, not $(uname -s)-$(uname -m)"
		exit 1
	fi
	command -v npm >/dev/null 2>&1 || { log "npm not found (Debian: apt-get install npm)"; exit 1; }
	mkdir -p "$dir"
	tgz="$dir/chdb-lib-linux-x64-gnu-$CHDB_VERSION.tgz"
	if [ ! -s "$tgz" ]; then
		log "fetching @chdb/lib-linux-x64-gnu@$CHDB_VERSION with npm (~170 MB, once)"
		(cd "$dir" && npm pack --silent "@chdb/lib-linux-x64-gnu@$CHDB_VERSION" >/dev/null) || { log "npm pack failed"; exit 1; }
	fi
	tmp="$(mktemp -d "$dir/unpack.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	tar -xzf "$tgz" -C "$tmp" package/libchdb.so || { log "no libchdb.so in $tgz"; exit 1; }
	mv "$tmp/package/libchdb.so" "$lib"
	rm -f "$tgz"
	log "libchdb.so $CHDB_VERSION in $lib"
	echo "$lib"
	;;
*)
	echo "usage: scripts/chdb.sh fetch" >&2
	exit 2
	;;
esac
