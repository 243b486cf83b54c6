#!/usr/bin/env bash
# A standalone ZooKeeper on loopback for the replicated cluster test
# (ClickHouse's Replicated*MergeTree tables keep their replicas in step
# through it). Production runs ClickHouse Keeper or a ZooKeeper ensemble.
#
#   scripts/zookeeper.sh install|start|stop|status
#
# Environment:
#   ZK_PORT       client port (default 2181), on 127.0.0.1 only
#   ZK_DATA_ROOT  default .data/zookeeper in the repository; the instance
#                 lives in ZK_DATA_ROOT/port-ZK_PORT
# install puts Debian's zookeeper package in place with apt-get when its
# jar is missing (it needs a Java runtime, which the package pulls in).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
port=${ZK_PORT:-2181}
data_root=${ZK_DATA_ROOT:-$repo/.data/zookeeper}
dir=$data_root/port-$port
pidfile=$dir/zookeeper.pid
jar=/usr/share/java/zookeeper.jar

log() { printf 'zookeeper.sh: %s\n' "$*" >&2; }

install() {
	if [ -f "$jar" ] && command -v java >/dev/null 2>&1; then
		return 0
	fi
	log "ZooKeeper not found; installing Debian's zookeeper with apt-get"
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends zookeeper >/dev/null
	[ -f "$jar" ] || { log "$jar still missing after install"; exit 1; }
}

running_pid() {
	[ -f "$pidfile" ] || return 1
	local pid
	pid=$(cat "$pidfile" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && { echo "$pid"; return 0; }
	return 1
}

# ruok asks the four-letter-word "ruok"; a serving ZooKeeper says "imok".
ruok() {
	local out
	out=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo ruok >&3 && cat <&3" 2>/dev/null) || return 1
	[ "$out" = "imok" ]
}

start() {
	if pid=$(running_pid) && ruok; then
		log "already running on 127.0.0.1:$port (pid $pid)"
		return 0
	fi
	if ruok; then
		log "port $port already answers, but not with this data directory's ZooKeeper"
		return 1
	fi
	install
	mkdir -p "$dir/data" "$dir/log"
	cat >"$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,mntr
CFG
	rm -f "$pidfile"
	log "starting ZooKeeper on 127.0.0.1:$port (data in $dir)"
	(cd "$dir" && exec java -Xmx256m -cp "$jar" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg") \
		>"$dir/log/stdout.log" 2>&1 </dev/null &
	echo $! >"$pidfile"
	local i pid
	pid=$(cat "$pidfile")
	for i in $(seq 1 240); do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "ZooKeeper exited during start; last log lines:"
			tail -n 20 "$dir/log/stdout.log" >&2 || true
			rm -f "$pidfile"
			return 1
		fi
		if ruok; then
			log "ready on 127.0.0.1:$port"
			return 0
		fi
		sleep 0.25
	done
	log "ZooKeeper did not answer within 60 s; last log lines:"
	tail -n 20 "$dir/log/stdout.log" >&2 || true
	return 1
}

stop() {
	local pid
	if ! pid=$(running_pid); then
		log "not running on port $port"
		return 0
	fi
	kill "$pid"
	local i
	for i in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || { log "stopped (pid $pid)"; rm -f "$pidfile"; return 0; }
		sleep 0.5
	done
	log "pid $pid did not stop in 30 s; killing"
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$pidfile"
}

status() {
	if pid=$(running_pid) && ruok; then
		echo "running on 127.0.0.1:$port (pid $pid)"
		return 0
	fi
	echo "not running on 127.0.0.1:$port"
	return 1
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
