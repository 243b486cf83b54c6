#!/usr/bin/env bash
# docker-compose for the test that validates docker-compose.yaml
# (tests/deploy/compose_test.go).
#
#   scripts/compose.sh install   install Debian's docker-compose with apt-get
#                                unless it is on PATH
#
# `docker-compose config` needs no Docker daemon: the test only parses and
# normalizes the file. Nothing is started here.
set -euo pipefail

log() { printf 'compose.sh: %s\n' "$*" >&2; }

case "${1:-}" in
install)
	if command -v docker-compose >/dev/null 2>&1; then
		exit 0
	fi
	log "docker-compose not found; installing Debian's docker-compose with apt-get"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
	command -v docker-compose >/dev/null 2>&1 || { log "docker-compose still missing after install"; exit 1; }
	;;
*)
	echo "usage: scripts/compose.sh install" >&2
	exit 2
	;;
esac
