# Sourced by the scripts that run a local daemon known by its pid file
# (clickhouse.sh, zookeeper.sh, slurm.sh); each defines log first.

# pid_in FILE: prints the pid in FILE when that process runs.
pid_in() {
	local pid
	[ -f "$1" ] || return 1
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && { echo "$pid"; return 0; }
	return 1
}

# apt_install PACKAGE...: installs Debian packages quietly (through sudo
# unless root).
apt_install() {
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	# policy-rc.d (or the absence of systemd) keeps the packages' own
	# services from starting; the scripts run their own.
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# await_start NAME PIDFILE SECONDS PROBE LOG...: polls PROBE four times a
# second until it succeeds while the pid in PIDFILE runs (our own process
# must be the one answering: a daemon of another data directory on the
# same port would answer too); when the process exits or SECONDS pass, it
# shows the logs' last lines and fails.
await_start() {
	local name=$1 pidfile=$2 secs=$3 probe=$4 pid i
	shift 4
	pid=$(cat "$pidfile")
	for i in $(seq 1 $((secs * 4))); do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "$name exited during start; last log lines:"
			tail -n 20 "$@" >&2 2>/dev/null || true
			rm -f "$pidfile"
			return 1
		fi
		"$probe" && return 0
		sleep 0.25
	done
	log "$name did not answer within $secs s; last log lines:"
	tail -n 20 "$@" >&2 2>/dev/null || true
	return 1
}

# stop_pidfile PIDFILE WHERE: stops the daemon with SIGTERM, and with
# SIGKILL when it has not stopped in 30 s.
stop_pidfile() {
	local pidfile=$1 pid i
	if ! pid=$(pid_in "$pidfile"); then
		log "not running on $2"
		return 0
	fi
	kill "$pid"
	for i in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || { log "stopped (pid $pid)"; rm -f "$pidfile"; return 0; }
		sleep 0.5
	done
	log "pid $pid did not stop in 30 s; killing"
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$pidfile"
}

# status_of PIDFILE PROBE WHERE: says whether the daemon runs and answers
# PROBE on WHERE (host:port), and exits 0 only when it does.
status_of() {
	local pid
	if pid=$(pid_in "$1") && "$2"; then
		echo "running on $3 (pid $pid)"
		return 0
	fi
	echo "not running on $3"
	return 1
}
