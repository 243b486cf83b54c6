#!/usr/bin/env bash
# A standalone ZooKeeper on loopback for the replicated cluster test
# (ClickHouse's Replicated*MergeTree tables keep their replicas in step
# through it) and the leader election's tests (internal/election, each on
# a private instance: storetest.StartZooKeeper). Production runs ClickHouse
# Keeper or a ZooKeeper ensemble.
#
# tickTime is 500 ms, so the server grants sessions of 1-10 s (2-20
# ticks): the election tests ask for 2 s to keep a failover short.
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
. "$repo/scripts/pidfile.sh"

install() {
	if [ -f "$jar" ] && command -v java >/dev/null 2>&1; then
		return 0
	fi
	log "ZooKeeper not found; installing Debian's zookeeper with apt-get"
	apt_install zookeeper
	[ -f "$jar" ] || { log "$jar still missing after install"; exit 1; }
}

running_pid() { pid_in "$pidfile"; }

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
	await_start ZooKeeper "$pidfile" 60 ruok "$dir/log/stdout.log" || return 1
	log "ready on 127.0.0.1:$port"
}

stop() { stop_pidfile "$pidfile" "port $port"; }

status() { status_of "$pidfile" ruok "127.0.0.1:$port"; }

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
