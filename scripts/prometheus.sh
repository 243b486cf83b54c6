#!/usr/bin/env bash
# Prometheus for the tests that scrape the collector and the server and
# check deploy/prometheus (tests/prometheus/prometheus_test.go).
#
#   scripts/prometheus.sh install   install Debian's prometheus (server and
#                                   promtool) with apt-get unless both are on PATH
#
# Nothing is started here: the tests run their own server on loopback with a
# temporary config and data directory, and stop it.
set -euo pipefail

log() { printf 'prometheus.sh: %s\n' "$*" >&2; }

case "${1:-}" in
install)
	if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
		exit 0
	fi
	log "prometheus or promtool not found; installing Debian's prometheus with apt-get"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	# policy-rc.d keeps the package from starting its own service.
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	# The package may enable a system service; the tests need none.
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
		$sudo systemctl stop prometheus || true
	fi
	command -v promtool >/dev/null 2>&1 || { log "promtool still missing after install"; exit 1; }
	;;
*)
	echo "usage: scripts/prometheus.sh install" >&2
	exit 2
	;;
esac
