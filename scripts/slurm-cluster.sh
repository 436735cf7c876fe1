#!/usr/bin/env bash
# slurm-cluster.sh: a 3-node Slurm cluster on one host, for slurm-llm's e2e tests.
#
#   scripts/slurm-cluster.sh up [--force] [--netns | --loopback]   (no mode: the mode of the
#                                     cluster that is up, else loopback)
#                              write /etc/slurm/slurm.conf and slurmdbd.conf, start munged,
#                              MariaDB, slurmdbd (accounts and test users made with sacctmgr),
#                              slurmctld and slurmd -N node1..node3, wait until sinfo shows the
#                              3 nodes usable
#   scripts/slurm-cluster.sh down     stop the daemons this script started (by PID), remove the
#                                     accounting database and the test users, and everything
#                                     `up --netns` created; safe to run at any time, also after
#                                     a half-failed `up`
#   scripts/slurm-cluster.sh status   mode, which daemons run, namespaces and cut links, sinfo
#   scripts/slurm-cluster.sh resume   return DOWN/DRAIN nodes to service
#
# Two modes:
#   loopback (default)  every daemon on 127.0.0.1 in the host's network namespace, slurmd
#                       ports 17001-17003 (`make e2e CLUSTER_MODE=loopback` where namespaces
#                       cannot be made; `make demo` skips its replicas step on it).
#   netns (--netns, or SLURM_CLUSTER_MODE=netns): what `make check`, CI and `make demo` use;
#                       each slurmd runs in its own network namespace (sllm-node1..3) with real
#                       addresses, like the site's compute nodes:
#                         "Ethernet" 10.77.0.0/24: bridge sllm-eth0 in the host namespace holds
#                           10.77.0.1 (slurmctld, nginx, tests); node1..3 are 10.77.0.11..13
#                           (interface eth0 in each node);
#                         "IPoIB" 10.78.0.0/24, between the nodes only: its bridge lives in the
#                           namespace sllm-ibsw (the "switch"); node1..3 are 10.78.0.11..13
#                           (interface ib0); the host namespace has no address on it, only an
#                           "unreachable" route so that nothing for it leaves the machine.
#                       /etc/hosts gets a block (between marker lines) naming nodeX and nodeX-ib;
#                       the namespaces share /etc/hosts with the host. slurmd is started with
#                       `nsenter --net=/run/netns/sllm-nodeX` (only the network namespace
#                       changes), so job steps run in the node's namespace.
#                       SlurmdTimeout=10 so that node loss shows within seconds.
#     Fault injection (netns mode only; each says what it simulates):
#   scripts/slurm-cluster.sh node-lose NODE          power loss of NODE
#   scripts/slurm-cluster.sh node-return NODE        NODE boots again: slurmd back, node usable
#   scripts/slurm-cluster.sh link-cut NODE [eth|ib]  NODE's switch port drops everything (both
#                                                    links when none is named); processes live
#   scripts/slurm-cluster.sh link-restore NODE [eth|ib]
#   scripts/slurm-cluster.sh exec NODE CMD [ARG...]  run CMD in NODE's network namespace
#
# Tests find the mode and the addresses in $STATE_FILE (/run/slurm-llm-cluster/cluster.env),
# key=value lines that bash can source: mode, nodes, controller_addr, and per node
# <node>_addr (slurm.conf NodeAddr), <node>_port; in netns mode also <node>_ns, <node>_eth,
# <node>_ib, <node>_ib_name, <node>_eth_if, <node>_ib_if, eth_net, ib_net.
#
# Accounting (both modes): real slurmdbd over a MariaDB server of the script's own (its datadir
# under /var/lib/slurm-llm-cluster, its socket and PID file under /run, TCP on 127.0.0.1 only,
# port 13306, so that a MariaDB of the machine's on 3306 is never touched); slurm.conf says
# accounting_storage/slurmdbd and priority/multifactor with fair share (Fair Tree, the
# factors recomputed every minute). `up` makes, with sacctmgr, the cluster, two accounts and
# two test users (system users made with useradd when missing, removed by `down`): the state
# file says accounting=slurmdbd, accounts=A,B (A first), acct_user_both (an association in both
# accounts, default A) and acct_user_one (in B only).
#
# Runs as root on Debian 12 with `apt-get install -y slurm-wlm slurmdbd mariadb-server munge`
# done (netns mode also needs iproute2 and nftables); needs no systemd (daemons are started
# directly). Every step is
# idempotent: `up` twice is fine. `up` refuses to overwrite a slurm.conf it did not write, unless
# --force, and refuses to switch modes while a cluster of the other mode is up (run `down`).
# The config is the project's own copy (see config below); nothing here reads other folders.
#
# SLURM_ROOT=DIR (for `make e2e-slurm24`; see the block "SLURM_ROOT" below): the daemons
# (munged, slurmctld, slurmd) run from the root file system DIR (chroot; scripts/slurm24-root.sh
# makes one with Debian 13's Slurm 24.11), slurm.conf, the munge key and the spool directories
# are DIR's; `up` bind-mounts the host's /proc /sys /dev /run /tmp /etc/hosts /usr/local
# /var/lib/slurm-llm /var/log/slurm (and $SLURM_ROOT_BINDS) into DIR, `down` unmounts them.
# The state file records slurm_root=DIR and slurm_root_binds=, so the commands after `up` need no
# variable.
set -euo pipefail

# SLURM_ROOT: see the block "SLURM_ROOT" below. Empty: the host's Slurm. Unset or empty while a
# cluster is up: that cluster's root (as the mode), so `down`, `status`, the fault commands and
# an `up` of the demo keep to it.
SLURM_ROOT=${SLURM_ROOT:-}
if [[ -z $SLURM_ROOT && -r /run/slurm-llm-cluster/cluster.env ]]; then
	SLURM_ROOT=$(sed -n 's/^slurm_root=//p' /run/slurm-llm-cluster/cluster.env | head -n 1)
	[[ -z $SLURM_ROOT ]] || SLURM_ROOT_BINDS=$(sed -n 's/^slurm_root_binds=//p' /run/slurm-llm-cluster/cluster.env | head -n 1)
fi
readonly SLURM_ROOT
readonly SLURM_CONF=$SLURM_ROOT/etc/slurm/slurm.conf
readonly CONF_MARK='# slurm-llm test cluster: written by scripts/slurm-cluster.sh'
readonly MUNGE_KEY=$SLURM_ROOT/etc/munge/munge.key
readonly MUNGE_PID=/run/munge/munged.pid
readonly CTLD_PID=/run/slurmctld.pid
readonly CTLD_LOG=/var/log/slurm/slurmctld.log
readonly STATE_DIR=/run/slurm-llm-cluster # PIDs of the daemons `up` started, and the mode
readonly STATE_FILE=$STATE_DIR/cluster.env
readonly USERS_MADE=$STATE_DIR/users-made # test users `up` made with useradd, for `down`

# Accounting: slurmdbd and its MariaDB, all started by this script (by PID, as the others).
readonly DBD_CONF=$SLURM_ROOT/etc/slurm/slurmdbd.conf
readonly DBD_PID=/run/slurmdbd.pid
readonly DBD_LOG=/var/log/slurm/slurmdbd.log
readonly DB_DIR=/var/lib/slurm-llm-cluster/mariadb # the datadir; `down` removes it
readonly DB_RUN=/run/slurm-llm-cluster-mariadb     # socket and PID file, owned by mysql
readonly DB_SOCK=$DB_RUN/mariadb.sock
readonly DB_PID=$DB_RUN/mariadbd.pid
readonly DB_LOG=/var/log/slurm/mariadb.log
readonly DB_PORT=13306
readonly DB_NAME=slurm_acct_db
readonly DB_USER=slurm
# A test database: no binary log, no doublewrite, the redo log flushed once a second, small
# buffers (mariadb-install-db and the first start take ~2.5 s instead of ~4.5 s; slurmdbd warns
# that these are not the values it recommends, which is true for a site, not for this).
readonly DB_OPTS=(--no-defaults --user=mysql "--datadir=$DB_DIR" --skip-log-bin --innodb-log-file-size=8M
	--innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --skip-name-resolve)
readonly ACCOUNTS=(chem physics)  # A, B
readonly ACCT_USER_BOTH=sllm-alice # associations in chem and physics, default chem
readonly ACCT_USER_ONE=sllm-bob    # in physics only
readonly NODES=(node1 node2 node3)
readonly WAIT_SECONDS=${SLURM_CLUSTER_WAIT:-30}

# netns mode: names and addresses. Namespaces and links all start with "sllm-" (links in the
# host namespace) so that `down` can find what an interrupted `up` left.
readonly NS_PREFIX=sllm-          # node namespaces: sllm-node1..3
readonly IB_SWITCH_NS=sllm-ibsw   # holds the IPoIB bridge; the host has no leg on that network
readonly IB_BRIDGE=ib-switch      # the IPoIB bridge, inside $IB_SWITCH_NS
readonly ETH_BRIDGE=sllm-eth0     # the Ethernet bridge, in the host namespace
readonly ETH_PREFIX=10.77.0       # /24: controller .1, nodes .11..
readonly IB_PREFIX=10.78.0        # /24: nodes .11..
readonly CTL_ADDR=$ETH_PREFIX.1
readonly NODE_ETH_IF=eth0         # interface names inside a node's namespace
readonly NODE_IB_IF=ib0
readonly HOSTS_FILE=/etc/hosts
readonly HOSTS_BEGIN='# BEGIN slurm-llm test cluster: written by scripts/slurm-cluster.sh up --netns, removed by down'
readonly HOSTS_END='# END slurm-llm test cluster'

MODE=loopback # set by cmd_up from its flags, by the other commands from $STATE_FILE

log() { printf 'slurm-cluster: %s\n' "$*"; }
die() { printf 'slurm-cluster: error: %s\n' "$*" >&2; exit 1; }

# show_log FILE: the tail of a daemon's log, for failure messages.
show_log() {
	if [[ -r $1 ]]; then
		printf -- '--- last lines of %s ---\n' "$1" >&2
		tail -n 20 "$1" >&2
	else
		printf -- '--- %s is missing ---\n' "$1" >&2
	fi
}

# node_index NODE: 1 for node1, …; dies for a name that is not one of ours.
node_index() {
	local i
	for i in "${!NODES[@]}"; do
		[[ ${NODES[$i]} == "$1" ]] && { echo $((i + 1)); return; }
	done
	die "unknown node '$1' (nodes: ${NODES[*]})"
}

node_ns() { printf '%s%s' "$NS_PREFIX" "$1"; }
node_eth() { printf '%s.%d' "$ETH_PREFIX" $((10 + $(node_index "$1"))); }
node_ib() { printf '%s.%d' "$IB_PREFIX" $((10 + $(node_index "$1"))); }
# Host-side end of a node's Ethernet veth (bridge port), and switch-side end of its IPoIB veth.
node_eth_port() { printf 'sllm-%s-e' "$1"; }
node_ib_port() { printf 'ib-%s' "$1"; }

# slurmd spool and slurmctld state per mode, so that switching modes never mixes job and node
# state saved under the other mode's addresses.
ctld_spool() { [[ $MODE == netns ]] && echo /var/spool/slurmctld-netns || echo /var/spool/slurmctld; }
slurmd_spool() { [[ $MODE == netns ]] && echo /var/spool/slurmd-netns || echo /var/spool/slurmd; }

# accounting_conf: slurm.conf's accounting and priority lines (both modes). slurmctld reaches
# slurmdbd at the controller's address (the nodes could too). Fair share is the only priority
# factor (Fair Tree, 22.05's default): jobs of one user keep their submit order (equal
# priorities go by job id), as with priority/basic before. PriorityCalcPeriod=1 (minutes, the
# least Slurm takes): the factors sshare prints follow new usage within a minute.
# No AccountingStorageEnforce: jobs of users without an association still run, as before.
accounting_conf() {
	local addr=127.0.0.1
	[[ $MODE == netns ]] && addr=$CTL_ADDR
	cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$addr
AccountingStoragePort=6819
PriorityType=priority/multifactor
PriorityCalcPeriod=1
PriorityWeightFairshare=10000
PriorityWeightAge=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
EOF
}

config() {
	local host
	host=$(hostname)
	if [[ $MODE == netns ]]; then
		config_netns "$host"
		return
	fi
	cat <<EOF
$CONF_MARK
# Remove this file or run "slurm-cluster.sh up --force" to replace it.
ClusterName=test
SlurmctldHost=${host}(127.0.0.1)
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmctldPidFile=$CTLD_PID
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmdPidFile=/var/run/slurmd-%n.pid
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldLogFile=$CTLD_LOG
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
KillWait=30
NodeName=node[1-3] NodeHostname=${host} NodeAddr=127.0.0.1 Port=[17001-17003] CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=gpu_ai Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=30
PartitionName=gpu_vasp Nodes=node[1-3] MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
}

# config_netns HOST: the netns mode's slurm.conf. Same scheduling as loopback; the differences:
# real addresses (each slurmd on the default port 6818 of its own namespace), NodeHostname = the
# node's name (resolvable through the hosts block), its own state directories, and
# SlurmdTimeout=10 (default 300): slurmctld pings every SlurmdTimeout/3 and sets a node DOWN
# after SlurmdTimeout without an answer, so node loss shows in seconds. ReturnToService=2: a
# DOWN node is usable again as soon as its slurmd registers (as in loopback mode).
# MessageTimeout and TCPTimeout stay at their defaults (10 s, 2 s).
config_netns() {
	local host=$1 n
	cat <<EOF
$CONF_MARK
# Mode: netns (each slurmd in its own network namespace). Remove this file or run
# "slurm-cluster.sh up --force" to replace it.
ClusterName=test
SlurmctldHost=${host}(${CTL_ADDR})
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
StateSaveLocation=$(ctld_spool)
SlurmctldPidFile=$CTLD_PID
SlurmdSpoolDir=$(slurmd_spool)/%n
SlurmdPidFile=/var/run/slurmd-%n.pid
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldLogFile=$CTLD_LOG
ReturnToService=2
SlurmdTimeout=10
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
KillWait=30
EOF
	for n in "${NODES[@]}"; do
		echo "NodeName=$n NodeHostname=$n NodeAddr=$(node_eth "$n") CPUs=2 RealMemory=4000 State=UNKNOWN"
	done
	cat <<EOF
PartitionName=gpu_ai Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=30
PartitionName=gpu_vasp Nodes=node[1-3] MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
}

slurmd_pidfile() { printf '/var/run/slurmd-%s.pid' "$1"; }
slurmd_log() { printf '/var/log/slurm/slurmd-%s.log' "$1"; }
slurmd_pattern() { printf 'slurmd.* -N %s( |$)' "$1"; }

# alive PIDFILE PATTERN: true if PIDFILE names a live process whose command line
# matches the extended regexp PATTERN (guards against a stale file and a reused PID).
alive() {
	local pid cmd
	[[ -r $1 ]] || return 1
	pid=$(tr -dc '0-9' <"$1")
	[[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
	[[ $cmd =~ $2 ]]
}

# wait_alive NAME PIDFILE PATTERN LOG: poll until the daemon's PID file names it, or fail.
wait_alive() {
	local deadline=$((SECONDS + WAIT_SECONDS))
	until alive "$2" "$3"; do
		if ((SECONDS >= deadline)); then
			show_log "$4"
			die "$1 did not start within ${WAIT_SECONDS}s (no live PID in $2)"
		fi
		sleep 0.2
	done
}

# no_inherited_fds CMD...: run CMD with only stdin, stdout and stderr of ours. A daemon keeps
# whatever descriptor it inherits for its whole life: started under
# `flock /tmp/slurm-llm-cluster.lock CMD`, munged held the lock (munged does not close
# inherited descriptors) long after the caller had gone.
no_inherited_fds() {
	(
		close_inherited_fds
		exec "$@"
	)
}

# close_inherited_fds: close every descriptor of this shell but 0, 1 and 2. For a daemon started
# in the background, call it in the `( ... ) &` subshell that then execs the daemon: run as
# `no_inherited_fds CMD &`, the background subshell that waits for no_inherited_fds' own subshell
# kept the caller's descriptors (the lock) as long as the daemon ran (mariadbd held it for ever).
close_inherited_fds() {
	local f fd
	for f in /proc/"$BASHPID"/fd/*; do
		fd=${f##*/}
		((fd > 2)) || continue
		exec {fd}>&-
	done
}

# remember NAME PIDFILE: record that `up` started this daemon, so `down` stops only ours.
remember() {
	mkdir -p "$STATE_DIR"
	cp "$2" "$STATE_DIR/$1.pid"
}

# state_mode: the mode recorded by the last `up` (empty when no state file).
state_mode() {
	[[ -r $STATE_FILE ]] || return 0
	sed -n 's/^mode=//p' "$STATE_FILE" | head -n 1
}

# load_mode: MODE from the state file, for every command but `up`.
load_mode() {
	local m
	m=$(state_mode)
	MODE=${m:-loopback}
}

# write_state: the mode and the node addresses, for `status`, `down` and tests (see the header).
write_state() {
	local n tmp
	mkdir -p "$STATE_DIR"
	tmp=$STATE_FILE.tmp
	{
		echo "# written by scripts/slurm-cluster.sh up; removed by down"
		echo "mode=$MODE"
		echo "accounting=slurmdbd"
		echo "accounts=$(
			IFS=,
			echo "${ACCOUNTS[*]}"
		)"
		echo "acct_user_both=$ACCT_USER_BOTH"
		echo "acct_user_one=$ACCT_USER_ONE"
		[[ -z $SLURM_ROOT ]] || printf 'slurm_root=%s\nslurm_root_binds=%s\n' "$SLURM_ROOT" "${SLURM_ROOT_BINDS:-}"
		echo "nodes=$(
			IFS=,
			echo "${NODES[*]}"
		)"
		if [[ $MODE == netns ]]; then
			echo "controller_addr=$CTL_ADDR"
			echo "eth_net=$ETH_PREFIX.0/24"
			echo "ib_net=$IB_PREFIX.0/24"
			for n in "${NODES[@]}"; do
				echo "${n}_addr=$(node_eth "$n")"
				echo "${n}_port=6818"
				echo "${n}_ns=$(node_ns "$n")"
				echo "${n}_eth=$(node_eth "$n")"
				echo "${n}_ib=$(node_ib "$n")"
				echo "${n}_ib_name=$n-ib"
				echo "${n}_eth_if=$NODE_ETH_IF"
				echo "${n}_ib_if=$NODE_IB_IF"
			done
		else
			echo "controller_addr=127.0.0.1"
			for n in "${NODES[@]}"; do
				echo "${n}_addr=127.0.0.1"
				echo "${n}_port=$((17000 + $(node_index "$n")))"
			done
		fi
	} >"$tmp"
	mv "$tmp" "$STATE_FILE"
}

write_config() {
	local force=$1 want
	want=$(config)
	if [[ -e $SLURM_CONF ]] && ! head -n 1 "$SLURM_CONF" | grep -qxF "$CONF_MARK"; then
		[[ $force == yes ]] || die "$SLURM_CONF exists and was not written by this script; move it away or use --force"
		log "replacing $SLURM_CONF (--force), old copy kept as $SLURM_CONF.orig"
		cp -p "$SLURM_CONF" "$SLURM_CONF.orig"
	fi
	if [[ -e $SLURM_CONF ]] && [[ $(cat "$SLURM_CONF") == "$want" ]]; then
		log "$SLURM_CONF is up to date"
		return
	fi
	mkdir -p /etc/slurm
	printf '%s\n' "$want" >"$SLURM_CONF.tmp"
	mv "$SLURM_CONF.tmp" "$SLURM_CONF"
	log "wrote $SLURM_CONF"
	if alive "$CTLD_PID" 'slurmctld'; then
		log "warning: slurmctld was already running with an older config; run 'down' then 'up' to apply it"
	fi
}

prepare_dirs() {
	local r=$SLURM_ROOT # the bind mounts are in place: $r/run is /run
	mkdir -p "$r$(ctld_spool)" "$r/var/log/slurm" "$r/run/munge" "$r/var/lib/munge" "$r/var/log/munge"
	for n in "${NODES[@]}"; do mkdir -p "$r$(slurmd_spool)/$n"; done
	chown munge:munge "$r/run/munge" "$r/var/lib/munge" "$r/var/log/munge"
	chmod 0755 "$r/run/munge"
	chmod 0700 "$r/var/log/munge"
	if [[ ! -s $MUNGE_KEY ]]; then
		mkdir -p "$(dirname "$MUNGE_KEY")"
		if command -v mungekey >/dev/null; then
			mungekey --create --keyfile="$MUNGE_KEY" --force
		else
			dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
		fi
		log "created $MUNGE_KEY"
	fi
	chown munge:munge "$(dirname "$MUNGE_KEY")" "$MUNGE_KEY"
	chmod 0700 "$(dirname "$MUNGE_KEY")"
	chmod 0400 "$MUNGE_KEY"
}

start_munged() {
	if alive "$MUNGE_PID" 'munged'; then
		log "munged already running (pid $(cat "$MUNGE_PID"))"
		return
	fi
	log "starting munged"
	no_inherited_fds "${IN_ROOT[@]}" runuser -u munge -- /usr/sbin/munged ||
		{ show_log "$SLURM_ROOT/var/log/munge/munged.log"; die "munged failed to start"; }
	wait_alive munged "$MUNGE_PID" 'munged' "$SLURM_ROOT/var/log/munge/munged.log"
	remember munged "$MUNGE_PID"
	"${IN_ROOT[@]}" munge -n | "${IN_ROOT[@]}" unmunge >/dev/null ||
		{ show_log "$SLURM_ROOT/var/log/munge/munged.log"; die "munged runs but 'munge -n | unmunge' fails"; }
}

start_slurmctld() {
	if alive "$CTLD_PID" 'slurmctld'; then
		log "slurmctld already running (pid $(cat "$CTLD_PID"))"
		return
	fi
	log "starting slurmctld"
	no_inherited_fds "${IN_ROOT[@]}" /usr/sbin/slurmctld || { show_log "$CTLD_LOG"; die "slurmctld failed to start"; }
	wait_alive slurmctld "$CTLD_PID" 'slurmctld' "$CTLD_LOG"
	remember slurmctld "$CTLD_PID"
	local deadline=$((SECONDS + WAIT_SECONDS))
	until scontrol ping 2>/dev/null | grep -q 'is UP'; do
		if ((SECONDS >= deadline)); then
			show_log "$CTLD_LOG"
			die "slurmctld does not answer 'scontrol ping' after ${WAIT_SECONDS}s"
		fi
		sleep 0.2
	done
	cancel_leftover_jobs
}

# cancel_leftover_jobs: slurmctld keeps its jobs across `down` and `up` (StateSaveLocation). A
# job whose test or demo died with it (killed, no cleanup) would be started again as soon as the
# nodes register, and hold nodes and ports under the next run (seen: a node-loss test's job,
# requeued 5 times, running beside the next e2e suite). The cluster is a test cluster: a fresh
# slurmctld starts with no job, cancelled before any slurmd is up, so none of them starts.
cancel_leftover_jobs() {
	local ids
	ids=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
	[[ -n ${ids// /} ]] || return 0
	log "cancelling jobs left from an earlier run: $ids"
	# shellcheck disable=SC2086
	scancel $ids || log "warning: scancel of the leftover jobs failed"
}

# start_slurmd NODE: slurmd -N NODE, in the node's network namespace in netns mode. nsenter, not
# `ip netns exec`: the latter also remounts /sys, which hides /sys/fs/cgroup, and slurmd 22.05
# then fails ("No filesystem mounted on /sys/fs/cgroup", "Unable to initialize cgroup plugin").
start_slurmd() {
	local n=$1 pidfile
	local -a run=()
	pidfile=$(slurmd_pidfile "$n")
	if alive "$pidfile" "$(slurmd_pattern "$n")"; then
		log "slurmd $n already running (pid $(cat "$pidfile"))"
		return
	fi
	if [[ $MODE == netns ]]; then
		ns_exists "$(node_ns "$n")" || die "namespace $(node_ns "$n") of $n is missing (node lost? run node-return $n)"
		run=(nsenter "--net=/run/netns/$(node_ns "$n")")
	fi
	log "starting slurmd -N $n${run:+ in namespace $(node_ns "$n")}"
	no_inherited_fds "${run[@]}" "${IN_ROOT[@]}" /usr/sbin/slurmd -N "$n" || { show_log "$(slurmd_log "$n")"; die "slurmd -N $n failed to start"; }
	wait_alive "slurmd $n" "$pidfile" "$(slurmd_pattern "$n")" "$(slurmd_log "$n")"
	remember "slurmd-$n" "$pidfile"
}

# node_states: "node state" lines for our nodes, e.g. "node1 idle", "node2 down*".
node_states() {
	sinfo -h -N -p gpu_ai -o '%N %T' 2>/dev/null | sort -u
}

# node_state NODE: that node's state as sinfo prints it (e.g. "idle", "down*"), or empty.
node_state() {
	node_states | awk -v n="$1" '$1 == n { print $2 }'
}

# bad_nodes: nodes that are down or drained (any suffix), one per line.
bad_nodes() {
	node_states | awk '$2 ~ /^(down|drain|drained|draining|fail|failing)/ { print $1 }'
}

# ready_count: nodes that can run jobs now (responding, not down or drained).
ready_count() {
	node_states | awk '$2 ~ /^(idle|mixed|allocated|completing)$/' | wc -l
}

resume_nodes() {
	local bad
	bad=$(bad_nodes | paste -sd, -)
	[[ -n $bad ]] || return 0
	log "resuming nodes: $bad"
	scontrol update NodeName="$bad" State=RESUME ||
		log "warning: 'scontrol update NodeName=$bad State=RESUME' failed"
}

wait_nodes() {
	local deadline=$((SECONDS + WAIT_SECONDS)) resumed=no
	log "waiting up to ${WAIT_SECONDS}s for ${#NODES[@]} nodes to be usable"
	until (($(ready_count) == ${#NODES[@]})); do
		if [[ $resumed == no && -n $(bad_nodes) ]] && (($(node_states | grep -c '\*$' || true) == 0)); then
			resume_nodes
			resumed=yes
		fi
		if ((SECONDS >= deadline)); then
			sinfo -N >&2 || true
			for n in "${NODES[@]}"; do show_log "$(slurmd_log "$n")"; done
			die "nodes not usable after ${WAIT_SECONDS}s (see sinfo and logs above)"
		fi
		sleep 0.5
	done
	sinfo
	log "cluster is up"
}

# ---- netns mode: namespaces, links, /etc/hosts ----

ns_exists() { [[ -e /run/netns/$1 ]]; }

# ns_add NS: create the network namespace NS with its loopback up.
ns_add() {
	ns_exists "$1" || ip netns add "$1" || die "cannot create network namespace $1 (ip netns add)"
	ip -n "$1" link set lo up || die "cannot set lo up in namespace $1"
}

# link_exists [-n NS] DEV: true if DEV exists (in NS, or in the host namespace).
link_exists() {
	if [[ $1 == -n ]]; then
		ip -n "$2" link show dev "$3" >/dev/null 2>&1
	else
		ip link show dev "$1" >/dev/null 2>&1
	fi
}

# net_fabric_up: the two "switches": the Ethernet bridge in the host namespace (with the
# controller's address) and the IPoIB bridge inside its own namespace.
net_fabric_up() {
	if ! link_exists "$ETH_BRIDGE"; then
		ip link add "$ETH_BRIDGE" type bridge || die "cannot create bridge $ETH_BRIDGE"
	fi
	ip addr replace "$CTL_ADDR/24" dev "$ETH_BRIDGE" || die "cannot give $ETH_BRIDGE the address $CTL_ADDR/24"
	ip link set "$ETH_BRIDGE" up || die "cannot set $ETH_BRIDGE up"
	# The host has no leg on the IPoIB network: without this route, packets for it would follow
	# the default route off the machine. With it, a connect fails at once (EHOSTUNREACH).
	ip route replace unreachable "$IB_PREFIX.0/24" ||
		die "cannot add the route 'unreachable $IB_PREFIX.0/24' in the host namespace"
	ns_add "$IB_SWITCH_NS"
	if ! link_exists -n "$IB_SWITCH_NS" "$IB_BRIDGE"; then
		ip -n "$IB_SWITCH_NS" link add "$IB_BRIDGE" type bridge || die "cannot create bridge $IB_BRIDGE in $IB_SWITCH_NS"
	fi
	ip -n "$IB_SWITCH_NS" link set "$IB_BRIDGE" up || die "cannot set $IB_BRIDGE up in $IB_SWITCH_NS"
}

# node_net_up NODE: the node's namespace, its two links plugged into the bridges, its
# addresses. Idempotent; a half-built node is completed.
node_net_up() {
	local n=$1 ns eport iport
	ns=$(node_ns "$n")
	eport=$(node_eth_port "$n")
	iport=$(node_ib_port "$n")
	ns_add "$ns"
	# Nothing but our two networks: no default route, so nothing a node sends leaves the machine.
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
	if ! link_exists -n "$ns" "$NODE_ETH_IF"; then
		ip link del "$eport" 2>/dev/null || true # a stale host end whose peer is gone
		ip link add "$eport" type veth peer name "$NODE_ETH_IF" netns "$ns" ||
			die "cannot create veth $eport <-> $ns:$NODE_ETH_IF"
	fi
	ip link set "$eport" master "$ETH_BRIDGE" up || die "cannot plug $eport into $ETH_BRIDGE"
	ip -n "$ns" addr replace "$(node_eth "$n")/24" dev "$NODE_ETH_IF" ||
		die "cannot set $(node_eth "$n")/24 on $ns:$NODE_ETH_IF"
	ip -n "$ns" link set "$NODE_ETH_IF" up || die "cannot set $ns:$NODE_ETH_IF up"
	if ! link_exists -n "$ns" "$NODE_IB_IF"; then
		ip -n "$IB_SWITCH_NS" link del "$iport" 2>/dev/null || true
		ip link add "$iport" netns "$IB_SWITCH_NS" type veth peer name "$NODE_IB_IF" netns "$ns" ||
			die "cannot create veth $IB_SWITCH_NS:$iport <-> $ns:$NODE_IB_IF"
	fi
	ip -n "$IB_SWITCH_NS" link set "$iport" master "$IB_BRIDGE" up ||
		die "cannot plug $iport into $IB_BRIDGE in $IB_SWITCH_NS"
	ip -n "$ns" addr replace "$(node_ib "$n")/24" dev "$NODE_IB_IF" ||
		die "cannot set $(node_ib "$n")/24 on $ns:$NODE_IB_IF"
	ip -n "$ns" link set "$NODE_IB_IF" up || die "cannot set $ns:$NODE_IB_IF up"
}

# hosts_block: the /etc/hosts lines of netns mode, markers included.
hosts_block() {
	local n
	echo "$HOSTS_BEGIN"
	for n in "${NODES[@]}"; do
		printf '%s\t%s\n' "$(node_eth "$n")" "$n"
		printf '%s\t%s\n' "$(node_ib "$n")" "$n-ib"
	done
	echo "$HOSTS_END"
}

# hosts_without_block: HOSTS_FILE without our block (markers and everything between).
hosts_without_block() {
	awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '
		$0 == b { skip = 1; next }
		$0 == e { skip = 0; next }
		!skip' "$HOSTS_FILE"
}

# hosts_write CONTENT_FILE: replace HOSTS_FILE's content in place (it may be a bind mount,
# which a rename would fail on), only if it changes.
hosts_write() {
	cmp -s "$1" "$HOSTS_FILE" && return 0
	cat "$1" >"$HOSTS_FILE" || die "cannot write $HOSTS_FILE"
}

hosts_add() {
	local tmp
	tmp=$(mktemp)
	{ hosts_without_block; hosts_block; } >"$tmp"
	hosts_write "$tmp"
	rm -f "$tmp"
}

hosts_remove() {
	local tmp
	[[ -e $HOSTS_FILE ]] || return 0
	grep -qxF "$HOSTS_BEGIN" "$HOSTS_FILE" || return 0
	tmp=$(mktemp)
	hosts_without_block >"$tmp"
	hosts_write "$tmp"
	rm -f "$tmp"
	log "removed the node names from $HOSTS_FILE"
}

# ns_kill_all NS: SIGKILL every process in the network namespace NS until none is left
# (slurmd may be forking a slurmstepd meanwhile). These are the cluster's node processes:
# slurmd, slurmstepd, job tasks, anything run with `exec NODE`.
ns_kill_all() {
	local ns=$1 pids deadline=$((SECONDS + WAIT_SECONDS))
	ns_exists "$ns" || return 0
	while pids=$(ip netns pids "$ns" 2>/dev/null) && [[ -n $pids ]]; do
		# shellcheck disable=SC2086 # one PID per word
		kill -KILL $pids 2>/dev/null || true
		if ((SECONDS >= deadline)); then
			log "warning: processes still in namespace $ns after ${WAIT_SECONDS}s: ${pids//$'\n'/ }"
			return 0
		fi
		sleep 0.1
	done
}

# node_unplug NODE: pull both of NODE's cables (delete its veth pairs) at once; the node's
# processes can no longer send or receive anything.
node_unplug() {
	local n=$1
	ip link del "$(node_eth_port "$n")" 2>/dev/null || true
	ns_exists "$IB_SWITCH_NS" && { ip -n "$IB_SWITCH_NS" link del "$(node_ib_port "$n")" 2>/dev/null || true; }
	return 0
}

# net_down: remove every namespace, link, route and hosts line of netns mode, whatever `up`
# got to. Processes still in the namespaces are killed first.
net_down() {
	local ns l
	for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep "^$NS_PREFIX" || true); do
		ns_kill_all "$ns"
		ip netns del "$ns" 2>/dev/null || log "warning: cannot delete namespace $ns"
		log "deleted namespace $ns"
	done
	# Host ends of the node veths, then the bridge: our links all start with "sllm-".
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep '^sllm-' || true); do
		[[ $l == "$ETH_BRIDGE" ]] && continue
		ip link del "$l" 2>/dev/null || true
	done
	if link_exists "$ETH_BRIDGE"; then
		ip link del "$ETH_BRIDGE" || log "warning: cannot delete bridge $ETH_BRIDGE"
		log "deleted bridge $ETH_BRIDGE"
	fi
	if ip route show type unreachable 2>/dev/null | grep -q "^unreachable $IB_PREFIX.0/24"; then
		ip route del unreachable "$IB_PREFIX.0/24" 2>/dev/null || true
	fi
	hosts_remove
}

# need_netns NODE: dies unless the cluster is up in netns mode and NODE is one of ours.
need_netns() {
	[[ $(id -u) == 0 ]] || die "must run as root"
	load_mode
	[[ $MODE == netns ]] || die "the cluster is not up in netns mode (start it with: $0 up --netns)"
	node_index "$1" >/dev/null
}

# ---- accounting: MariaDB, slurmdbd, accounts and users ----

# dbd_config PASS: slurmdbd.conf. SlurmUser=root, as slurm.conf's; slurmdbd listens on every
# address at 6819 (DbdHost=localhost names where it runs) and stores in our MariaDB over TCP.
dbd_config() {
	cat <<EOF2
$CONF_MARK
# Remove this file or run "slurm-cluster.sh up --force" to replace it.
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
PidFile=$DBD_PID
LogFile=$DBD_LOG
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$1
StorageLoc=$DB_NAME
EOF2
}

# dbd_pass: the database password slurmdbd.conf holds (ours), else a new one.
dbd_pass() {
	local p=''
	if [[ -r $DBD_CONF ]] && head -n 1 "$DBD_CONF" | grep -qxF "$CONF_MARK"; then
		p=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
	fi
	[[ -n $p ]] || p=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
	printf '%s' "$p"
}

# write_dbd_config FORCE PASS: slurmdbd.conf, mode 0600 and owned by SlurmUser (slurmdbd refuses
# a file others can read: it holds the database password). As write_config: a file we did not
# write is kept unless --force.
write_dbd_config() {
	local force=$1 want
	want=$(dbd_config "$2")
	if [[ -e $DBD_CONF ]] && ! head -n 1 "$DBD_CONF" | grep -qxF "$CONF_MARK"; then
		[[ $force == yes ]] || die "$DBD_CONF exists and was not written by this script; move it away or use --force"
		log "replacing $DBD_CONF (--force), old copy kept as $DBD_CONF.orig"
		cp -p "$DBD_CONF" "$DBD_CONF.orig"
	fi
	if [[ -e $DBD_CONF ]] && [[ $(cat "$DBD_CONF") == "$want" ]]; then
		chown root:root "$DBD_CONF"
		chmod 0600 "$DBD_CONF"
		return
	fi
	mkdir -p "$(dirname "$DBD_CONF")"
	(umask 077 && printf '%s\n' "$want" >"$DBD_CONF.tmp")
	chown root:root "$DBD_CONF.tmp"
	mv "$DBD_CONF.tmp" "$DBD_CONF"
	log "wrote $DBD_CONF"
	if alive "$DBD_PID" 'slurmdbd'; then
		log "warning: slurmdbd was already running with an older config; run 'down' then 'up' to apply it"
	fi
}

# db_sql: run the SQL on stdin as MariaDB's root (unix-socket authentication: we are root).
db_sql() {
	mariadb --no-defaults --protocol=socket "--socket=$DB_SOCK" -u root --batch
}

# start_mariadb: initialise the datadir if it has none (mariadb-install-db), start mariadbd
# (it does not fork: started in the background, in its own session, with no descriptor of
# ours), wait until it answers on its socket.
start_mariadb() {
	local deadline
	if alive "$DB_PID" 'mariadbd'; then
		log "mariadbd already running (pid $(cat "$DB_PID"))"
		return
	fi
	mkdir -p "$DB_RUN" /var/log/slurm
	touch "$DB_LOG"
	chown mysql:mysql "$DB_RUN" "$DB_LOG"
	if [[ ! -d $DB_DIR/mysql ]]; then
		log "initialising the accounting database in $DB_DIR"
		rm -rf "$DB_DIR"
		mkdir -p "$DB_DIR"
		chown mysql:mysql "$DB_DIR"
		chmod 0700 "$DB_DIR"
		mariadb-install-db "${DB_OPTS[@]}" --auth-root-authentication-method=socket --skip-test-db \
			>>"$DB_LOG" 2>&1 || { show_log "$DB_LOG"; die "mariadb-install-db failed"; }
		# A new database gives a new ClusterID: a slurmctld state that kept the last one is stale.
		rm -f {"",$SLURM_ROOT}/var/spool/slurmctld{,-netns}/clustername
	fi
	log "starting mariadbd (127.0.0.1:$DB_PORT)"
	(
		close_inherited_fds
		exec setsid /usr/sbin/mariadbd "${DB_OPTS[@]}" "--socket=$DB_SOCK" "--pid-file=$DB_PID" \
			--bind-address=127.0.0.1 "--port=$DB_PORT" "--log-error=$DB_LOG"
	) </dev/null >>"$DB_LOG" 2>&1 &
	wait_alive mariadbd "$DB_PID" 'mariadbd' "$DB_LOG"
	remember mariadbd "$DB_PID"
	deadline=$((SECONDS + WAIT_SECONDS))
	until mariadb-admin --no-defaults "--socket=$DB_SOCK" -u root ping >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			show_log "$DB_LOG"
			die "mariadbd does not answer on $DB_SOCK after ${WAIT_SECONDS}s"
		fi
		sleep 0.1
	done
}

# db_grant PASS: the database and slurmdbd's user (password PASS, from 127.0.0.1 only).
db_grant() {
	db_sql <<EOF2 || { show_log "$DB_LOG"; die "cannot create the database $DB_NAME and its user $DB_USER"; }
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$1';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$1';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
EOF2
}

start_slurmdbd() {
	local deadline
	if alive "$DBD_PID" 'slurmdbd'; then
		log "slurmdbd already running (pid $(cat "$DBD_PID"))"
		return
	fi
	log "starting slurmdbd"
	no_inherited_fds "${IN_ROOT[@]}" /usr/sbin/slurmdbd || { show_log "$DBD_LOG"; die "slurmdbd failed to start"; }
	wait_alive slurmdbd "$DBD_PID" 'slurmdbd' "$DBD_LOG"
	remember slurmdbd "$DBD_PID"
	# Up once sacctmgr gets an answer (the first start creates the tables first).
	deadline=$((SECONDS + WAIT_SECONDS))
	until sacctmgr -n -P show cluster format=Cluster >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			show_log "$DBD_LOG"
			die "slurmdbd does not answer 'sacctmgr show cluster' after ${WAIT_SECONDS}s"
		fi
		sleep 0.2
	done
}

# unix_user NAME: a system user without a home or a shell (for munge, keys and jobs), made
# when missing and then remembered for `down`.
unix_user() {
	id -u "$1" >/dev/null 2>&1 && return 0
	useradd --system --no-create-home --shell /usr/sbin/nologin "$1" || die "useradd $1 failed"
	echo "$1" >>"$USERS_MADE"
	log "made the system user $1"
}

# sacct_add WHAT...: sacctmgr -i add WHAT, failing loudly.
sacct_add() {
	local out
	out=$(sacctmgr -i add "$@" 2>&1) || { printf '%s\n' "$out" >&2; die "sacctmgr add $* failed"; }
}

# ensure_accounting: the cluster, the accounts and the users in slurmdbd; only what is missing
# is added (each sacctmgr add takes ~0.5 s). Before slurmctld starts: it then loads the
# associations (with the users' uids: the Unix users exist first) and computes the first
# fair-share factors with them.
ensure_accounting() {
	local cluster a u have name accts
	cluster=$(sed -n 's/^ClusterName=//p' "$SLURM_CONF")
	if ! sacctmgr -n -P show cluster format=Cluster | grep -qxF "$cluster"; then
		sacct_add cluster "$cluster"
		log "accounting: added the cluster $cluster"
	fi
	have=$(sacctmgr -n -P show account format=Account)
	for a in "${ACCOUNTS[@]}"; do
		grep -qxF "$a" <<<"$have" && continue
		sacct_add account "$a" "Description=test-$a" Organization=slurm-llm
		log "accounting: added the account $a"
	done
	unix_user "$ACCT_USER_BOTH"
	unix_user "$ACCT_USER_ONE"
	for u in "$ACCT_USER_BOTH:${ACCOUNTS[0]},${ACCOUNTS[1]}" "$ACCT_USER_ONE:${ACCOUNTS[1]}"; do
		name=${u%%:*} accts=${u#*:}
		have=$(sacctmgr -n -P show user "$name" withassoc format=Account | sort | paste -sd, -)
		[[ $have == "$(tr , '\n' <<<"$accts" | sort | paste -sd, -)" ]] && continue
		sacct_add user "$name" "Account=$accts" "DefaultAccount=${accts%%,*}"
		log "accounting: user $name in $accts (default ${accts%%,*})"
	done
	if [[ -n $SLURM_ROOT ]]; then # the users just made, for the daemons in the root
		cp /etc/passwd "$SLURM_ROOT/etc/passwd" && cp /etc/group "$SLURM_ROOT/etc/group" ||
			die "cannot copy the host's users into $SLURM_ROOT"
	fi
}

# ---- SLURM_ROOT: the daemons and the clients from another root (make e2e-slurm24) ----
# With SLURM_ROOT=DIR every daemon runs as `chroot DIR CMD`, and so do the client commands this
# script calls (the shell functions below shadow them). What the daemons and the tests share
# with the host is bind-mounted into DIR by `up` (root_mount) and unmounted by `down`
# (root_umount): /run (PID files, the munge socket, this script's state), /tmp (the tests'
# directories), /var/log/slurm (the tests read slurmctld.log), /etc/hosts (netns names),
# /usr/local, /var/lib/slurm-llm, /proc, /sys, /dev, and the paths in $SLURM_ROOT_BINDS
# (space-separated: the repository). Users: the host's /etc/passwd and /etc/group are copied
# into DIR by `up` (tests add users; scripts/slurm24-root.sh's wrappers copy them again when
# they change). Without SLURM_ROOT all of this is a no-op.
IN_ROOT=()
ROOT_BINDS=()
if [[ -n $SLURM_ROOT ]]; then
	IN_ROOT=(chroot "$SLURM_ROOT")
	ROOT_BINDS=(/proc /sys /dev /run /tmp /etc/hosts /usr/local /var/lib/slurm-llm /var/log/slurm)
	# shellcheck disable=SC2206 # space-separated paths
	ROOT_BINDS+=(${SLURM_ROOT_BINDS:-})
	scontrol() { chroot "$SLURM_ROOT" scontrol "$@"; }
	squeue() { chroot "$SLURM_ROOT" squeue "$@"; }
	scancel() { chroot "$SLURM_ROOT" scancel "$@"; }
	sinfo() { chroot "$SLURM_ROOT" sinfo "$@"; }
	sacctmgr() { chroot "$SLURM_ROOT" sacctmgr "$@"; } # a 22.05 client cannot talk to 24.11's slurmdbd
	sshare() { chroot "$SLURM_ROOT" sshare "$@"; }
fi

# root_check_up: dies unless SLURM_ROOT (if set) holds the daemons, and unless the cluster that
# is up (if any) runs from the same root.
root_check_up() {
	local cur b
	cur=$([[ -r $STATE_FILE ]] && sed -n 's/^slurm_root=//p' "$STATE_FILE" | head -n 1 || true)
	if [[ -r $STATE_FILE && $cur != "$SLURM_ROOT" ]]; then
		die "a cluster from root '${cur:-/}' is up (see $STATE_FILE); run '$0 down' before 'up' with SLURM_ROOT='$SLURM_ROOT'"
	fi
	[[ -n $SLURM_ROOT ]] || return 0
	for b in munged slurmctld slurmd slurmdbd; do
		[[ -x $SLURM_ROOT/usr/sbin/$b ]] || die "SLURM_ROOT=$SLURM_ROOT has no /usr/sbin/$b (make it with scripts/slurm24-root.sh build)"
	done
	for b in sinfo scontrol squeue scancel munge unmunge; do
		[[ -x $SLURM_ROOT/usr/bin/$b ]] || die "SLURM_ROOT=$SLURM_ROOT has no /usr/bin/$b"
	done
}

# root_mount: the bind mounts of ROOT_BINDS into SLURM_ROOT (each once), and the host's users.
# /proc, /sys and /dev recursively (cgroups, pts) and made slaves, so that unmounting them
# never reaches the host's mounts.
root_mount() {
	local p t
	[[ -n $SLURM_ROOT ]] || return 0
	for p in "${ROOT_BINDS[@]}"; do
		[[ -e $p ]] || mkdir -p "$p"
		t=$SLURM_ROOT$p
		if [[ -d $p ]]; then mkdir -p "$t"; else mkdir -p "$(dirname "$t")"; [[ -e $t ]] || : >"$t"; fi
		mountpoint -q "$t" && continue
		case $p in
		/proc | /sys | /dev)
			mount --rbind "$p" "$t" && mount --make-rslave "$t" ;;
		*) mount --bind "$p" "$t" ;;
		esac || die "cannot bind-mount $p on $t"
	done
	cp /etc/passwd "$SLURM_ROOT/etc/passwd" && cp /etc/group "$SLURM_ROOT/etc/group" ||
		die "cannot copy the host's users into $SLURM_ROOT"
	log "root $SLURM_ROOT: bind-mounted ${ROOT_BINDS[*]}"
}

# root_umount: every mount under SLURM_ROOT, deepest first (also those of an interrupted `up`).
root_umount() {
	local m
	[[ -n $SLURM_ROOT ]] || return 0
	for m in $(awk -v r="$SLURM_ROOT/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" || log "warning: cannot unmount $m"
	done
	log "root $SLURM_ROOT: unmounted"
}

# ---- commands ----

cmd_up() {
	local force=no arg cur pass asked=${SLURM_CLUSTER_MODE:-}
	for arg in "$@"; do
		case $arg in
		--force) force=yes ;;
		--netns) asked=netns ;;
		--loopback) asked=loopback ;;
		*) die "up: unknown option '$arg' (want --force, --netns, --loopback)" ;;
		esac
	done
	# No mode asked for: keep the mode of a cluster that is up (so that the
	# demo and the tests run on whichever is up), else loopback.
	MODE=${asked:-$(state_mode)}
	MODE=${MODE:-loopback}
	[[ $MODE == loopback || $MODE == netns ]] || die "SLURM_CLUSTER_MODE must be loopback or netns, not '$MODE'"
	[[ $(id -u) == 0 ]] || die "must run as root"
	root_check_up
	for b in munged slurmctld slurmd sinfo scontrol sacctmgr; do
		[[ -z $SLURM_ROOT ]] || break # root_check_up looked in the root
		command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
			die "$b not found; install with: apt-get install -y slurm-wlm munge"
	done
	for b in slurmdbd mariadbd mariadb-install-db mariadb mariadb-admin; do
		command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
			die "$b not found; install with: apt-get install -y slurmdbd mariadb-server"
	done
	cur=$(state_mode)
	if [[ -z $cur ]] && alive "$CTLD_PID" slurmctld && [[ -r $SLURM_CONF ]]; then
		# Up without a state file (an older version of this script): the config tells the mode.
		grep -q '^# Mode: netns' "$SLURM_CONF" && cur=netns || cur=loopback
	fi
	if [[ -n $cur && $cur != "$MODE" ]]; then
		die "a cluster in $cur mode is up (see $STATE_FILE); run '$0 down' before 'up' in $MODE mode"
	fi
	if [[ $MODE == netns ]]; then
		for b in ip nft; do
			command -v "$b" >/dev/null || die "$b not found; install with: apt-get install -y iproute2 nftables"
		done
	fi
	# The state file first: if `up` fails half way, `down` and `status` know what it was doing.
	write_state
	root_mount
	write_config "$force"
	pass=$(dbd_pass)
	write_dbd_config "$force" "$pass"
	prepare_dirs
	if [[ $MODE == netns ]]; then
		net_fabric_up
		for n in "${NODES[@]}"; do node_net_up "$n"; done
		hosts_add
		log "netns: controller $CTL_ADDR on $ETH_BRIDGE; nodes $(for n in "${NODES[@]}"; do printf '%s=%s/%s ' "$n" "$(node_eth "$n")" "$(node_ib "$n")"; done)"
	fi
	start_munged
	start_mariadb
	db_grant "$pass"
	start_slurmdbd
	ensure_accounting
	start_slurmctld
	for n in "${NODES[@]}"; do start_slurmd "$n"; done
	wait_nodes
}

# stop NAME PATTERN: SIGTERM the daemon `up` recorded, wait for it, SIGKILL at a deadline.
stop() {
	local file="$STATE_DIR/$1.pid" pid deadline
	if ! alive "$file" "$2"; then
		rm -f "$file"
		log "$1: not running (or not started by this script)"
		return
	fi
	pid=$(tr -dc '0-9' <"$file")
	log "stopping $1 (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + WAIT_SECONDS))
	while [[ -e /proc/$pid ]]; do
		if ((SECONDS >= deadline)); then
			log "$1 ignored SIGTERM for ${WAIT_SECONDS}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.2
	done
	rm -f "$file"
}

# cmd_down: stop our daemons, then remove whatever netns mode created (always: also after a
# half-failed `up` or a lost state file, everything of ours is found by name).
cmd_down() {
	[[ $(id -u) == 0 ]] || die "must run as root"
	for n in "${NODES[@]}"; do stop "slurmd-$n" "$(slurmd_pattern "$n")"; done
	stop slurmctld 'slurmctld'
	stop slurmdbd 'slurmdbd'
	stop mariadbd 'mariadbd'
	stop munged 'munged'
	accounting_down
	net_down
	root_umount
	rm -f "$STATE_FILE"
	log "cluster is down"
}

# accounting_down: the database goes (its datadir), and with it what slurmctld keeps of it in
# its state directories (the associations' cache, their usage, the last decay, messages still
# for slurmdbd): the next `up` starts from an empty database, whose association ids would not
# match them. The test users `up` made are removed.
accounting_down() {
	local d f u
	if [[ -d $DB_DIR ]]; then
		rm -rf "$DB_DIR"
		log "removed the accounting database ($DB_DIR)"
	fi
	rm -rf "$DB_RUN"
	for d in {"",$SLURM_ROOT}/var/spool/slurmctld{,-netns}; do
		# clustername holds the ClusterID the database gave: with the database gone, a 24.11
		# slurmctld refuses to start on it ("CLUSTER ID MISMATCH").
		for f in assoc_mgr_state assoc_usage qos_usage last_decay_ran fed_mgr_state dbd.messages clustername; do
			rm -f "$d/$f" "$d/$f.old"
		done
	done
	if [[ -r $USERS_MADE ]]; then
		while read -r u; do
			[[ -n $u ]] || continue
			userdel "$u" 2>/dev/null && log "removed the system user $u" || log "warning: userdel $u failed"
		done <"$USERS_MADE"
		rm -f "$USERS_MADE"
	fi
}

cmd_status() {
	local rc=0 ns cut
	load_mode
	if [[ -r $STATE_FILE ]]; then
		log "mode: $MODE ($STATE_FILE)"
	else
		log "mode: none recorded (no $STATE_FILE: not brought up by this script)"
	fi
	alive "$MUNGE_PID" munged && log "munged: running" || { log "munged: stopped"; rc=1; }
	alive "$DB_PID" mariadbd && log "mariadbd: running" || { log "mariadbd: stopped"; rc=1; }
	alive "$DBD_PID" slurmdbd && log "slurmdbd: running" || { log "slurmdbd: stopped"; rc=1; }
	alive "$CTLD_PID" slurmctld && log "slurmctld: running" || { log "slurmctld: stopped"; rc=1; }
	for n in "${NODES[@]}"; do
		alive "$(slurmd_pidfile "$n")" "$(slurmd_pattern "$n")" && log "slurmd $n: running" ||
			{ log "slurmd $n: stopped"; rc=1; }
		if [[ $MODE == netns ]]; then
			ns=$(node_ns "$n")
			if ! ns_exists "$ns"; then
				log "  $n: no namespace $ns (lost: node-return $n brings it back)"
				rc=1
				continue
			fi
			cut=$(ip netns exec "$ns" nft list tables 2>/dev/null | sed -n 's/^table netdev sllm_cut_//p' | paste -sd, -)
			log "  $n: namespace $ns, eth $(node_eth "$n"), ib $(node_ib "$n")${cut:+, CUT: $cut}"
		fi
	done
	if [[ $MODE != netns ]] && ip netns list 2>/dev/null | grep -q "^$NS_PREFIX"; then
		log "warning: netns leftovers (namespaces $NS_PREFIX*); '$0 down' removes them"
	fi
	sinfo || rc=1
	return "$rc"
}

cmd_resume() {
	[[ $(id -u) == 0 ]] || die "must run as root"
	load_mode
	resume_nodes
	wait_nodes
}

# cmd_node_lose NODE: power loss. Both links go first (the veth pairs are deleted, so the node
# falls silent at once: no FIN or RST from its dying sockets reaches anyone), then every process
# in its namespace (slurmd, slurmstepd, tasks) gets SIGKILL, then the namespace itself goes,
# taking the node's TCP state with it, as a reboot would. slurmctld notices only through its
# pings (SlurmdTimeout); peers with open connections see silence, never a reset.
cmd_node_lose() {
	local n=$1 ns
	need_netns "$n"
	ns=$(node_ns "$n")
	if ! ns_exists "$ns"; then
		log "$n is already lost (no namespace $ns)"
		return 0
	fi
	node_unplug "$n"
	ns_kill_all "$ns"
	ip netns del "$ns" || die "cannot delete namespace $ns"
	rm -f "$STATE_DIR/slurmd-$n.pid"
	log "$n lost: links unplugged, every process killed, namespace $ns gone"
}

# cmd_node_return NODE: the node boots again: a fresh namespace with its links and addresses,
# slurmd started. Waits until the node is usable; with ReturnToService=2 it comes back by itself
# once slurmd registers, and only if it stays DOWN/DRAIN while responding is it resumed (logged).
cmd_node_return() {
	local n=$1 st deadline=$((SECONDS + WAIT_SECONDS)) bad_polls=0 resumed=no
	need_netns "$n"
	if ! ns_exists "$IB_SWITCH_NS" || ! link_exists "$ETH_BRIDGE"; then
		die "the switches are gone; run '$0 down' then '$0 up --netns'"
	fi
	node_net_up "$n"
	start_slurmd "$n"
	while :; do
		st=$(node_state "$n")
		case $st in
		idle | mixed | allocated | completing)
			if [[ $resumed == yes ]]; then
				log "$n is back ($st) after a resume"
			else
				log "$n is back ($st) by itself"
			fi
			return 0
			;;
		down | drain* | fail*)
			# Responding (no '*') but not usable: give ReturnToService two polls, then resume.
			bad_polls=$((bad_polls + 1))
			if ((bad_polls >= 2)) && [[ $resumed == no ]]; then
				log "$n responds but is $st; resuming it"
				scontrol update NodeName="$n" State=RESUME || log "warning: resume of $n failed"
				resumed=yes
			fi
			;;
		*) bad_polls=0 ;;
		esac
		if ((SECONDS >= deadline)); then
			sinfo -N >&2 || true
			show_log "$(slurmd_log "$n")"
			die "$n not usable ${WAIT_SECONDS}s after its slurmd started (state '$st')"
		fi
		sleep 0.5
	done
}

# link_names ARG: the links a link-cut/-restore argument names: eth, ib, or both (no argument).
link_names() {
	case ${1:-} in
	eth | ib) echo "$1" ;;
	'' | all) echo eth ib ;;
	*) die "link must be eth or ib, not '$1'" ;;
	esac
}

# cmd_link_cut NODE [eth|ib]: a dead switch port (or a pulled cable the NIC does not notice):
# every frame in and out of the node's link is dropped, ARP included, while the node's processes
# live on and its interface stays up. TCP peers see silence, never an RST: a writer fills its
# buffers, a reader waits, retransmissions go unanswered. Done with an nftables netdev table
# (ingress and egress hooks on the device) in the node's namespace.
cmd_link_cut() {
	local n=$1 l dev ns
	need_netns "$n"
	ns=$(node_ns "$n")
	ns_exists "$ns" || die "$n is lost (no namespace $ns)"
	for l in $(link_names "${2:-}"); do
		[[ $l == eth ]] && dev=$NODE_ETH_IF || dev=$NODE_IB_IF
		ip netns exec "$ns" nft -f - <<EOF || die "cannot cut $n's $l link (nft in $ns)"
table netdev sllm_cut_$l {
	chain in { type filter hook ingress device "$dev" priority -500; policy drop; }
	chain out { type filter hook egress device "$dev" priority -500; policy drop; }
}
EOF
		log "$n: $l link cut (all traffic on $ns:$dev dropped)"
	done
}

# cmd_link_restore NODE [eth|ib]: the switch port works again; connections that have not yet
# given up resume.
cmd_link_restore() {
	local n=$1 l ns
	need_netns "$n"
	ns=$(node_ns "$n")
	ns_exists "$ns" || die "$n is lost (no namespace $ns)"
	for l in $(link_names "${2:-}"); do
		if ip netns exec "$ns" nft list table netdev "sllm_cut_$l" >/dev/null 2>&1; then
			ip netns exec "$ns" nft delete table netdev "sllm_cut_$l" || die "cannot restore $n's $l link"
			log "$n: $l link restored"
		else
			log "$n: $l link was not cut"
		fi
	done
}

# cmd_exec NODE CMD...: run CMD in NODE's network namespace (as if logged in on the node), the
# way slurmd runs there (nsenter: the mounts stay the host's). CMD replaces this script, so
# its PID is the caller's child.
cmd_exec() {
	local n=$1
	shift
	[[ ${1:-} == -- ]] && shift
	(($# > 0)) || die "exec: no command given"
	need_netns "$n"
	exec nsenter "--net=/run/netns/$(node_ns "$n")" "$@"
}

usage() {
	cat >&2 <<EOF
usage: $0 up [--force] [--netns] | down | status | resume
       $0 node-lose NODE | node-return NODE          (netns mode)
       $0 link-cut NODE [eth|ib] | link-restore NODE [eth|ib]
       $0 exec NODE CMD [ARG...]
EOF
	exit 2
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
resume) cmd_resume ;;
node-lose) (($# == 2)) || usage; cmd_node_lose "$2" ;;
node-return) (($# == 2)) || usage; cmd_node_return "$2" ;;
link-cut) (($# == 2 || $# == 3)) || usage; cmd_link_cut "$2" "${3:-}" ;;
link-restore) (($# == 2 || $# == 3)) || usage; cmd_link_restore "$2" "${3:-}" ;;
exec) (($# >= 3)) || usage; shift; cmd_exec "$@" ;;
*) usage ;;
esac
