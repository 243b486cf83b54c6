#!/usr/bin/env bash
# A one-node Slurm cluster on loopback for the tests (docs/slurm.md).
#
#   scripts/slurm.sh install|start|stop|status|env
#
#   install  Debian's slurm-wlm daemons, slurmdbd, munge and mariadb-server
#            with apt-get, unless they are on the machine already
#   start    installs when needed, then starts munged, mariadbd, slurmdbd,
#            slurmctld and slurmd with a project-local config and state, and
#            creates the test accounts and users; a second start while the
#            cluster runs does nothing. Prints the env file's path.
#   stop     cancels the cluster's jobs and stops every daemon by its pid
#   status   exit 0 when every daemon runs and the node answers
#   env      prints the env file (SLURM_CONF=..., for `. <(scripts/slurm.sh env)`)
#
# Environment:
#   GPUMETER_SLURM_DIR        state, config and logs (default .data/slurm)
#   GPUMETER_SLURM_PORT_BASE  slurmctld's port; slurmd, slurmdbd and MariaDB
#                             take the next three (default 16817: 16817-16820)
#   GPUMETER_SLURM_PROCTRACK  cgroup or linuxproc (default: cgroup when the
#                             cgroup v1 freezer hierarchy is writable)
#
# The cluster "gpumeter" has one node, gpunode1 (8 CPUs, 2 a100 and 2 h100
# GPUs as GRES on device nodes this script makes under $dir/dev; there is no
# real GPU), partitions gpu (default) and debug, accounts physics and
# chemistry and astro, and users gpumeter-ada (physics), gpumeter-bob
# (chemistry), gpumeter-carol (both, default chemistry) and gpumeter-dan
# (astro), created as system users when missing. deploy/slurm/job_submit.lua
# is the job_submit plugin (it checks nothing without its config). Every daemon listens on 127.0.0.1 only; munged runs as munge,
# mariadbd as mysql, slurmdbd and slurmctld as slurm, slurmd as root (it
# starts jobs as their users).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${GPUMETER_SLURM_DIR:-$repo/.data/slurm}
base=${GPUMETER_SLURM_PORT_BASE:-16817}
ctld_port=$base
slurmd_port=$((base + 1))
dbd_port=$((base + 2))
db_port=$((base + 3))
cluster=gpumeter
node=gpunode1
daemons=(slurmd slurmctld slurmdbd mariadbd munged) # in stop order

log() { printf 'slurm.sh: %s\n' "$*" >&2; }
. "$repo/scripts/pidfile.sh"

export SLURM_CONF=$dir/etc/slurm.conf

have_all() {
	local c
	for c in slurmctld slurmd slurmdbd sbatch sacct sacctmgr munged mariadbd mariadb-install-db; do
		command -v "$c" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$c" >/dev/null 2>&1 || return 1
	done
}

install() {
	export PATH=$PATH:/usr/sbin
	have_all && return 0
	log "installing Debian's slurm-wlm (slurmctld, slurmd, slurmdbd, client), munge and mariadb-server with apt-get"
	apt_install slurmctld slurmd slurmdbd slurm-client munge mariadb-server
	have_all || { log "Slurm or MariaDB still missing after apt-get install"; return 1; }
}

pid_of() { pid_in "$dir/run/$1.pid"; } # daemon: its pid when it runs

# launch NAME CMD...: runs CMD in the foreground of a background subshell
# that execs it, so $! is the daemon's pid; the lock's descriptor is not
# inherited (a daemon holding it would block every later start).
launch() {
	local name=$1
	shift
	(exec "$@" 9>&- >>"$dir/log/$name.out" 2>&1 </dev/null) &
	echo $! >"$dir/run/$name.pid"
}

# wait_for NAME SECONDS CMD...: polls CMD until it succeeds while NAME runs.
wait_for() {
	local name=$1 secs=$2 i
	shift 2
	for i in $(seq 1 $((secs * 5))); do
		if ! pid_of "$name" >/dev/null; then
			log "$name exited during start; last log lines:"
			tail -n 25 "$dir/log/$name"* >&2 2>/dev/null || true
			return 1
		fi
		if [ "$(type -t "$1")" = function ]; then
			"$@" >/dev/null 2>&1 && return 0
		elif timeout 10 "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	log "$name not ready within $secs s; last log lines:"
	tail -n 25 "$dir/log/$name"* >&2 2>/dev/null || true
	return 1
}

choose_proctrack() {
	proctrack=${GPUMETER_SLURM_PROCTRACK:-}
	if [ -z "$proctrack" ]; then
		proctrack=linuxproc
		if [ -d /sys/fs/cgroup/freezer ] && [ -w /sys/fs/cgroup/freezer ]; then
			proctrack=cgroup
		fi
	fi
	case $proctrack in cgroup | linuxproc) ;; *)
		log "GPUMETER_SLURM_PROCTRACK=$proctrack: want cgroup or linuxproc"
		return 2
		;;
	esac
}

write_config() {
	mkdir -p "$dir"/{etc,run,log,ctld,slurmd,munge,dev,jobs,mysql}
	chmod 0755 "$dir" "$dir/etc" "$dir/run" "$dir/dev"
	chmod 1777 "$dir/jobs" "$dir/log"
	chown slurm: "$dir/ctld"
	# Every directory above must be traversable by the daemons' users.
	local d=$dir
	while [ "$d" != "/" ]; do
		d=$(dirname "$d")
		chmod o+x "$d" 2>/dev/null || true
	done
	# GPU device nodes (NVIDIA's major 195) for gres.conf's File=; nothing
	# opens them.
	local i
	for i in 0 1 2 3; do
		[ -e "$dir/dev/nvidia$i" ] || mknod -m 0666 "$dir/dev/nvidia$i" c 195 "$i"
	done
	local tracking="ProctrackType=proctrack/linuxproc"
	if [ "$proctrack" = cgroup ]; then
		tracking="ProctrackType=proctrack/cgroup"
	fi
	cat >"$dir/etc/slurm.conf" <<CONF
# Written by scripts/slurm.sh; edits are lost on the next start.
ClusterName=$cluster
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/run/slurmctld.self.pid
SlurmdPidFile=$dir/run/slurmd.self.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$tracking
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:h100
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
JobSubmitPlugins=lua
MinJobAge=600
KillWait=2
InactiveLimit=0
MessageTimeout=10
NodeName=$node NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=8000 Gres=gpu:a100:2,gpu:h100:2 State=UNKNOWN
PartitionName=gpu Nodes=$node Default=YES MaxTime=INFINITE State=UP
PartitionName=debug Nodes=$node MaxTime=INFINITE State=UP
CONF
	# gpumeter's admission plugin, as deployed: it accepts every job until
	# a test writes its config (gpumeter-admission.conf) beside it;
	# slurmctld reads the script again when it changes.
	cp "$repo/deploy/slurm/job_submit.lua" "$dir/etc/job_submit.lua"
	cat >"$dir/etc/gres.conf" <<CONF
AutoDetect=off
NodeName=$node Name=gpu Type=a100 File=$dir/dev/nvidia[0-1]
NodeName=$node Name=gpu Type=h100 File=$dir/dev/nvidia[2-3]
CONF
	cat >"$dir/etc/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=no
CONF
	cat >"$dir/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$munge_socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=slurm
PidFile=$dir/run/slurmdbd.self.pid
LogFile=$dir/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=gpumeter-test
StorageLoc=slurm_acct_db
CONF
	chown slurm: "$dir/etc/slurmdbd.conf"
	chmod 0600 "$dir/etc/slurmdbd.conf"
	cat >"$dir/env" <<ENV
SLURM_CONF=$dir/etc/slurm.conf
GPUMETER_SLURM_DIR=$dir
GPUMETER_SLURM_CLUSTER=$cluster
GPUMETER_SLURM_NODE=$node
GPUMETER_SLURM_PROCTRACK=$proctrack
ENV
}

# Slurm 22.05's clients take the munge socket from AuthInfo for slurmctld
# but not for slurmdbd, so the socket is munged's default. A munged already
# answering there serves the cluster (every daemon is on this host, so any
# key works); otherwise the harness starts its own, with its own key.
munge_socket=/run/munge/munge.socket.2

munge_answers() { timeout 5 sh -c "munge -n -S '$munge_socket' | unmunge -S '$munge_socket'" >/dev/null 2>&1; }

start_munge() {
	pid_of munged >/dev/null && return 0
	if munge_answers; then
		log "using the munged already serving $munge_socket"
		return 0
	fi
	mkdir -p "$(dirname "$munge_socket")"
	# The key's directory is munge's alone; the socket's is open to every
	# user (clients of every uid authenticate through it).
	chown munge: "$dir/munge" "$(dirname "$munge_socket")"
	chmod 0700 "$dir/munge"
	chmod 0755 "$(dirname "$munge_socket")"
	if [ ! -s "$dir/munge/munge.key" ]; then
		dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
	fi
	chown munge: "$dir/munge/munge.key"
	chmod 0400 "$dir/munge/munge.key"
	rm -f "$munge_socket" "$munge_socket.lock"
	launch munged setpriv --reuid=munge --regid=munge --init-groups \
		munged --foreground --force --socket="$munge_socket" \
		--key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
		--log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
	wait_for munged 20 munge_answers
}

mariadb_client() { timeout 20 mariadb --no-defaults --socket="$dir/mysql/mysqld.sock" -uroot "$@"; }

start_mariadb() {
	pid_of mariadbd >/dev/null && return 0
	chown mysql: "$dir/mysql"
	if [ ! -d "$dir/mysql/data/mysql" ]; then
		log "initialising MariaDB in $dir/mysql/data"
		mariadb-install-db --no-defaults --datadir="$dir/mysql/data" --user=mysql \
			--auth-root-authentication-method=socket --skip-test-db >"$dir/log/mariadb-install.log" 2>&1 ||
			{ tail -n 20 "$dir/log/mariadb-install.log" >&2; return 1; }
	fi
	rm -f "$dir/mysql/mysqld.sock"
	launch mariadbd mariadbd --no-defaults --user=mysql --datadir="$dir/mysql/data" \
		--socket="$dir/mysql/mysqld.sock" --port="$db_port" --bind-address=127.0.0.1 \
		--pid-file="$dir/mysql/mariadbd.pid" --log-error="$dir/log/mariadbd.log" \
		--skip-name-resolve --skip-log-bin --innodb-buffer-pool-size=64M \
		--innodb-flush-log-at-trx-commit=0 --innodb-lock-wait-timeout=900
	wait_for mariadbd 30 mariadb_client -e "SELECT 1"
	mariadb_client -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'gpumeter-test';
		GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
	pid_of slurmdbd >/dev/null && return 0
	launch slurmdbd slurmdbd -D
	wait_for slurmdbd 60 sacctmgr -n list cluster
}

# sacct_ensure WHAT NAME ARGS...: adds an entity unless sacctmgr lists it.
sacct_ensure() {
	local what=$1 name=$2
	shift 2
	if [ -n "$(sacctmgr -n -P list "$what" "$name" format="$what" 2>/dev/null)" ]; then
		return 0
	fi
	sacctmgr -i add "$what" "$name" "$@" >/dev/null
}

create_users() {
	sacct_ensure cluster "$cluster"
	sacct_ensure account physics cluster="$cluster" description=physics organization=science
	sacct_ensure account chemistry cluster="$cluster" description=chemistry organization=science
	sacct_ensure account astro cluster="$cluster" description=astronomy organization=science
	local u
	for u in gpumeter-ada gpumeter-bob gpumeter-carol gpumeter-dan; do
		id "$u" >/dev/null 2>&1 || useradd --system --no-create-home --home-dir "$dir/jobs" --shell /bin/sh "$u"
	done
	sacct_ensure user gpumeter-ada account=physics cluster="$cluster"
	sacct_ensure user gpumeter-bob account=chemistry cluster="$cluster"
	sacct_ensure user gpumeter-dan account=astro cluster="$cluster"
	if [ -z "$(sacctmgr -n -P list assoc user=gpumeter-carol account=physics format=account 2>/dev/null)" ]; then
		sacctmgr -i add user gpumeter-carol account=chemistry,physics defaultaccount=chemistry cluster="$cluster" >/dev/null
	fi
}

start_slurmctld() {
	pid_of slurmctld >/dev/null && return 0
	launch slurmctld slurmctld -D -i
	wait_for slurmctld 30 scontrol ping
}

node_up() {
	local state
	state=$(timeout 10 sinfo -h -n "$node" -o %T 2>/dev/null | head -n 1)
	case $state in idle* | mixed* | allocated* | completing*) return 0 ;; esac
	return 1
}

start_slurmd() {
	if ! pid_of slurmd >/dev/null; then
		launch slurmd slurmd -D -N "$node"
	fi
	wait_for slurmd 30 node_up
}

# fail_loudly names the command that ended a start or stop (set -e
# would end it without a word).
fail_loudly() { set -E; trap 'log "failed: $BASH_COMMAND (line $LINENO)"' ERR; }

start() {
	fail_loudly
	# Tests of several packages start the cluster at once: one installs
	# and starts it, the others wait here and find it running.
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock 9
	install
	export PATH=$PATH:/usr/sbin
	choose_proctrack
	# What the running cluster was started from: a start after this script
	# changed (or with another proctrack) restarts it.
	local id
	id="$(sha256sum <"$0" | cut -c1-16) proctrack/$proctrack"
	if status >/dev/null 2>&1; then
		if [ "$(cat "$dir/run/started-from" 2>/dev/null)" = "$id" ]; then
			cp "$repo/deploy/slurm/job_submit.lua" "$dir/etc/job_submit.lua"
			log "already running (SLURM_CONF=$SLURM_CONF)"
			echo "$dir/env"
			return 0
		fi
		log "running, but started from another version of this script or proctrack: restarting"
		flock -u 9
		stop
		flock 9
	fi
	local t0=$SECONDS
	write_config
	start_munge
	start_mariadb
	start_slurmdbd
	create_users
	start_slurmctld
	start_slurmd
	echo "$id" >"$dir/run/started-from"
	log "cluster $cluster ready in $((SECONDS - t0)) s (proctrack/$proctrack; SLURM_CONF=$SLURM_CONF)"
	echo "$dir/env"
}

stop() {
	fail_loudly
	[ -d "$dir" ] || { log "not running"; return 0; }
	export PATH=$PATH:/usr/sbin
	exec 9>"$dir/.lock"
	flock 9
	if pid_of slurmctld >/dev/null; then
		# Cancel the jobs and let slurmd see their steps end, so that no
		# slurmstepd or job process outlives the daemons.
		local jobs i
		jobs=$(timeout 10 squeue -h -o %i 2>/dev/null || true)
		if [ -n "$jobs" ]; then
			timeout 10 scancel --full --quiet $jobs 2>/dev/null || true
			for i in $(seq 1 100); do
				[ -z "$(timeout 10 squeue -h -o %i 2>/dev/null || true)" ] && break
				sleep 0.1
			done
		fi
	fi
	local name pid i
	for name in "${daemons[@]}"; do
		pid=$(pid_of "$name") || continue
		kill "$pid" 2>/dev/null || true
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name (pid $pid) did not stop in 10 s; killing"
			kill -9 "$pid" 2>/dev/null || true
		fi
		rm -f "$dir/run/$name.pid"
		log "stopped $name (pid $pid)"
	done
}

status() {
	local name ok=0
	for name in "${daemons[@]}"; do
		if pid=$(pid_of "$name"); then
			echo "$name: running (pid $pid)"
		elif [ "$name" = munged ] && munge_answers; then
			echo "munged: not ours, answering on $munge_socket"
		else
			echo "$name: not running"
			ok=1
		fi
	done
	[ $ok -eq 0 ] && PATH=$PATH:/usr/sbin node_up || return 1
	echo "node $node: up"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
status) status ;;
env) cat "$dir/env" ;;
*) echo "usage: $0 install|start|stop|status|env" >&2; exit 2 ;;
esac
