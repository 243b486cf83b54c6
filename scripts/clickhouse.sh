#!/usr/bin/env bash
# Local ClickHouse for development, tests and the demo.
#
#   scripts/clickhouse.sh start|stop|kill|status|restart|client [args]
#
# Environment:
#   CH_TCP_PORT     native port (default 9000); several instances on different
#                   ports run side by side, each under .data/clickhouse/tcp-PORT
#   CH_HTTP_PORT    HTTP port, used only for the readiness probe
#                   (default CH_TCP_PORT - 9000 + 8123)
#   CH_INTERSERVER_PORT  (default CH_TCP_PORT - 9000 + 9009)
#   CH_DATA_ROOT    default .data/clickhouse in the repository
#   CLICKHOUSE_BIN  a server binary to use; otherwise a modern single
#                   `clickhouse` on PATH, then Debian's /usr/sbin/clickhouse-server,
#                   installed with apt-get when none is found.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
tcp_port=${CH_TCP_PORT:-9000}
http_port=${CH_HTTP_PORT:-$((tcp_port - 9000 + 8123))}
interserver_port=${CH_INTERSERVER_PORT:-$((tcp_port - 9000 + 9009))}
data_root=${CH_DATA_ROOT:-$repo/.data/clickhouse}
dir=$data_root/tcp-$tcp_port
pidfile=$dir/clickhouse.pid

log() { printf 'clickhouse.sh: %s\n' "$*" >&2; }
. "$repo/scripts/pidfile.sh"

# find_server sets server_cmd (an array) to a runnable server command.
find_server() {
	if [ -n "${CLICKHOUSE_BIN:-}" ]; then
		[ -x "$CLICKHOUSE_BIN" ] || { log "CLICKHOUSE_BIN=$CLICKHOUSE_BIN is not executable"; exit 1; }
		case "$(basename "$CLICKHOUSE_BIN")" in
		clickhouse) server_cmd=("$CLICKHOUSE_BIN" server) ;;
		*) server_cmd=("$CLICKHOUSE_BIN") ;;
		esac
		return
	fi
	if command -v clickhouse >/dev/null 2>&1; then
		server_cmd=("$(command -v clickhouse)" server)
		return
	fi
	for c in /usr/sbin/clickhouse-server /usr/bin/clickhouse-server; do
		if [ -x "$c" ]; then
			server_cmd=("$c")
			return
		fi
	done
	install_debian
	server_cmd=(/usr/sbin/clickhouse-server)
}

install_debian() {
	log "no ClickHouse server found; installing Debian's clickhouse-server with apt-get"
	apt_install clickhouse-server clickhouse-client
}

# client runs a query against this instance with whatever client exists.
client() {
	if command -v clickhouse-client >/dev/null 2>&1; then
		clickhouse-client --host 127.0.0.1 --port "$tcp_port" "$@"
	elif command -v clickhouse >/dev/null 2>&1; then
		clickhouse client --host 127.0.0.1 --port "$tcp_port" "$@"
	else
		log "no clickhouse client found"
		return 1
	fi
}

running_pid() { pid_in "$pidfile"; }

ping() {
	# The HTTP /ping answers "Ok." once the server accepts queries; the native
	# port is then open as well.
	local out
	if command -v curl >/dev/null 2>&1; then
		out=$(curl -fsS --max-time 2 "http://127.0.0.1:$http_port/ping" 2>/dev/null) || return 1
		[ "$out" = "Ok." ]
	else
		out=$(client --connect_timeout 2 -q "SELECT 1" 2>/dev/null) || return 1
		[ "$out" = "1" ]
	fi
}

write_config() {
	mkdir -p "$dir/data" "$dir/tmp" "$dir/user_files" "$dir/format_schemas" "$dir/log"
	cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>$dir/log/clickhouse-server.log</log>
        <errorlog>$dir/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>3</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>$tcp_port</tcp_port>
    <http_port>$http_port</http_port>
    <interserver_http_port>$interserver_port</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <path>$dir/data/</path>
    <tmp_path>$dir/tmp/</tmp_path>
    <user_files_path>$dir/user_files/</user_files_path>
    <format_schema_path>$dir/format_schemas/</format_schema_path>
    <users_config>$dir/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>536870912</mark_cache_size>
    <uncompressed_cache_size>536870912</uncompressed_cache_size>
    <mlock_executable>false</mlock_executable>
${CH_EXTRA_CONFIG:-}
</yandex>
XML
	cat >"$dir/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>8000000000</max_memory_usage>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas><default></default></quotas>
</yandex>
XML
}

start() {
	if pid=$(running_pid); then
		if ping; then
			log "already running on 127.0.0.1:$tcp_port (pid $pid)"
			return 0
		fi
	fi
	if ping; then
		log "port $tcp_port (HTTP $http_port) already answers, but not with this data directory's server; stop that one or pick other ports"
		return 1
	fi
	find_server
	write_config
	local runas=()
	if [ "$(id -u)" -eq 0 ]; then
		# ClickHouse refuses to run as root on purpose; run as its own user.
		id clickhouse >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin clickhouse
		chown -R clickhouse: "$dir"
		# Every directory above the data must be traversable by that user.
		local d=$dir
		while [ "$d" != "/" ]; do
			d=$(dirname "$d")
			chmod o+x "$d" 2>/dev/null || true
		done
		runas=(setpriv --reuid=clickhouse --regid=clickhouse --init-groups)
	fi
	rm -f "$pidfile"
	log "starting ${server_cmd[*]} on 127.0.0.1:$tcp_port (data in $dir)"
	# The subshell execs the server, so $! is the server's own pid.
	(cd "$dir" && exec "${runas[@]}" "${server_cmd[@]}" --config-file="$dir/config.xml") \
		>"$dir/log/stdout.log" 2>&1 </dev/null &
	echo $! >"$pidfile"
	await_start "server on port $tcp_port (taken?)" "$pidfile" 60 ping \
		"$dir/log/clickhouse-server.err.log" "$dir/log/stdout.log" || return 1
	log "ready on 127.0.0.1:$tcp_port"
}

stop() { stop_pidfile "$pidfile" "port $tcp_port"; }

# kill9 ends the server with SIGKILL (fault tests: no clean shutdown, no
# flushed parts) and waits until the process is gone.
kill9() {
	local pid
	if ! pid=$(running_pid); then
		log "not running on port $tcp_port"
		return 0
	fi
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	rm -f "$pidfile"
	log "killed (pid $pid)"
}

status() { status_of "$pidfile" ping "127.0.0.1:$tcp_port"; }

case "${1:-}" in
start) start ;;
stop) stop ;;
kill) kill9 ;;
restart) stop; start ;;
status) status ;;
client) shift; client "$@" ;;
*) echo "usage: $0 start|stop|kill|restart|status|client [args]" >&2; exit 2 ;;
esac
