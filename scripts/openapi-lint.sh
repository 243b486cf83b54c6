#!/usr/bin/env bash
# Lints the API's OpenAPI document (internal/server/openapi.json) with
# Redocly CLI, fetched by npx at a pinned version (REDOCLY_VERSION), for
# `make test`. Node.js and npm come from Debian's nodejs and npm packages
# (apt-get) when missing.
#
# The rule set is Redocly's recommended-strict: every rule of the
# recommended set, each warning an error, so a warning fails the build.
# Two rules are off: info-license and info-license-strict ask for a license
# in the document, and the repository declares none to name.
set -euo pipefail

REDOCLY_VERSION="${REDOCLY_VERSION:-2.77.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
doc="$root/internal/server/openapi.json"

log() { printf 'openapi-lint.sh: %s\n' "$*" >&2; }

if ! command -v npx >/dev/null 2>&1; then
	log "npx not found; installing Debian's nodejs and npm with apt-get"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
	command -v npx >/dev/null 2>&1 || { log "npx still missing after install"; exit 1; }
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat >"$work/redocly.yaml" <<'YAML'
extends:
  - recommended-strict
rules:
  info-license: off
  info-license-strict: off
YAML
# From the temporary directory, so no redocly.yaml of the caller's is read.
cd "$work"
NO_UPDATE_NOTIFIER=1 REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
	npx --yes "@redocly/cli@$REDOCLY_VERSION" lint --config "$work/redocly.yaml" "$doc"
