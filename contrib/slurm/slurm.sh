#!/bin/bash
# slurm.sh: a private one-node Slurm on this machine, for tests of `srun --mpi=pmix`.
#
#   slurm.sh run CMD [ARGS...]   start munged, slurmctld and slurmd, wait until the node is
#                                idle, run CMD (SLURM_CONF exported, so srun, sinfo and
#                                scancel talk to this Slurm), stop everything, exit with
#                                CMD's status; the usual way to use this script
#   slurm.sh down                stop what a killed run left behind and remove its files
#   slurm.sh probe               exit 0 if the tools are here, else say why and exit 77
#
# Everything lives in $dir (default /tmp/mpiv-slurm): slurm.conf, a MUNGE key made for this
# run, munged's socket, Slurm's state, spool, pid and log files. This machine is the only
# node, with the CPUs, cores and memory `slurmd -C` finds; MpiDefault=pmix;
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none need no cgroup set-up. Ports
# 16817 and 16818 (or the next free pair). The system's Slurm and MUNGE set-up (/etc/slurm,
# /etc/munge, their services) is not used or touched.
#
# Every daemon is started with MPIV_SLURM_TAG=$dir in its environment, which the processes
# it starts (slurmstepd) inherit: `down` ends exactly the processes carrying the tag, so a
# daemon left by a killed run is found without trusting a stale pid file. One instance runs
# at a time: `run` takes a lock (waiting up to MPIV_SLURM_LOCK_WAIT seconds, default 600)
# and, holding it, treats anything it finds in $dir as stale.
#
# Exit 77 (automake: SKIP) with the reason when Slurm cannot run here: not root, Slurm or
# MUNGE not installed (Debian: slurm-wlm), srun without the pmix plugin, or daemons that do
# not bring the node up within MPIV_SLURM_START_WAIT seconds (default 60).
set -euo pipefail

dir=${MPIV_SLURM_DIR:-/tmp/mpiv-slurm}
lockfile=$dir.lock
tag=MPIV_SLURM_TAG=$dir

say() { echo "slurm: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}
skip() {
    echo "slurm: cannot run Slurm here: $*"
    exit 77
}

probe() {
    local tool
    [ "$(id -u)" -eq 0 ] || { echo "slurm: needs root (slurmd runs jobs as their users)"; return 77; }
    for tool in slurmctld slurmd srun sinfo scancel munged munge flock ss; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "slurm: $tool is not installed (Debian: slurm-wlm, munge, iproute2)"
            return 77
        fi
    done
}

# tagged: the pids of the processes started by this set-up (see above).
tagged() {
    local f
    # One grep over all processes (a process ending meanwhile is an unreadable file).
    for f in $(grep -l -s -z -x -F "$tag" /proc/[0-9]*/environ || true); do
        f=${f#/proc/}
        echo "${f%/environ}"
    done
}

# stop_pids SECONDS PID...: TERM, then KILL whatever still runs after SECONDS.
stop_pids() {
    local limit=$1 pid left
    shift
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    for _ in $(seq $((limit * 5))); do
        left=
        for pid in "$@"; do
            kill -0 "$pid" 2>/dev/null && left="$left $pid"
        done
        [ -z "$left" ] && return 0
        sleep 0.2
    done
    say "killing$left (still running after ${limit} s)"
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
}

# down: ends the jobs, then the daemons (slurmd, slurmctld, munged: each needs the next
# while it stops), then anything else carrying the tag, and removes $dir.
down() {
    local name pids
    if [ -f "$dir/slurm.conf" ] && [ -n "$(tagged)" ]; then
        SLURM_CONF=$dir/slurm.conf timeout 10 scancel --quiet --full --user=root 2>/dev/null || true
    fi
    for name in slurmd slurmctld munged; do
        pids=
        if [ -f "$dir/$name.pid" ]; then
            pids=$(cat "$dir/$name.pid" 2>/dev/null || true)
            # Only if it is still this set-up's daemon (the pid may have been reused).
            if [ -n "$pids" ] && ! grep -q -z -x -F "$tag" "/proc/$pids/environ" 2>/dev/null; then
                pids=
            fi
        fi
        # shellcheck disable=SC2086
        stop_pids 10 $pids
    done
    pids=$(tagged)
    if [ -n "$pids" ]; then
        say "ending processes left by this set-up: ${pids//$'\n'/ }"
        # shellcheck disable=SC2086
        stop_pids 5 $pids
    fi
    rm -rf "$dir"
}

# free_port N: the first port from N on that nothing listens on (TCP).
free_port() {
    local port=$1
    while [ -n "$(ss -Hltn "sport = :$port")" ]; do
        port=$((port + 1))
    done
    echo "$port"
}

# start NAME CMD...: a daemon in the foreground of a background job, with the tag.
start() {
    local name=$1
    shift
    # fd 9 is the lock: a daemon left by a killed run must not hold it.
    env "$tag" "$@" >"$dir/$name.out" 2>&1 9>&- &
    echo $! >"$dir/$name.pid"
}

up() {
    local host node_line ctld_port slurmd_port state wait=${MPIV_SLURM_START_WAIT:-60}
    if [ -e "$dir" ] || [ -n "$(tagged)" ]; then
        say "removing a set-up left by an earlier run"
        down
    fi
    # munged requires its socket's directory to be searchable by all (the key stays 0400).
    mkdir -m 0755 "$dir"
    mkdir -m 0700 "$dir/state" "$dir/spool"
    head -c 1024 /dev/urandom >"$dir/munge.key"
    chmod 0400 "$dir/munge.key"
    start munged munged --foreground --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
        --pid-file="$dir/munged.pid.own" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"
    for _ in $(seq 50); do
        [ -S "$dir/munge.socket" ] && break
        sleep 0.1
    done
    munge -S "$dir/munge.socket" -n </dev/null | unmunge -S "$dir/munge.socket" >/dev/null 2>&1 ||
        skip "munged does not work: $(tail -n 3 "$dir/munged.out" "$dir/munged.log" 2>/dev/null)"

    # This node as slurmd sees it (its name, CPUs, sockets, cores, threads, memory), so that
    # slurmd's registration matches the configuration.
    node_line=$(slurmd -C | grep '^NodeName=') || skip "slurmd -C failed"
    host=${node_line#NodeName=}
    host=${host%% *}
    ctld_port=$(free_port 16817)
    slurmd_port=$(free_port $((ctld_port + 1)))
    cat >"$dir/slurm.conf" <<EOF
# Private one-node Slurm of contrib/slurm/slurm.sh (removed when it ends).
ClusterName=mpivtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid.own
SlurmdPidFile=$dir/slurmd.pid.own
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=mpiv Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    local plugins
    plugins=$(srun --mpi=list 2>&1 || true)
    grep -q -w pmix <<<"$plugins" || skip "srun --mpi=list shows no pmix plugin: $plugins"
    start slurmctld slurmctld -D -c -f "$SLURM_CONF"
    start slurmd slurmd -D -f "$SLURM_CONF"
    # Bounded wait for the node to come up idle.
    state=
    for _ in $(seq $((wait * 2))); do
        state=$(sinfo -h -N -o %T 2>/dev/null || true)
        [ "$state" = idle ] && break
        sleep 0.5
    done
    if [ "$state" != idle ]; then
        tail -n 5 "$dir"/*.out "$dir"/slurm*.log 2>/dev/null || true
        skip "the node is '${state:-not known}', not idle, after $wait s (logs above)"
    fi
    say "up: node $host idle ($(sinfo -h -N -o '%c CPUs'), ports $ctld_port and $slurmd_port, $dir)"
}

# run, the set-up lock and the end of run (contrib/setup_lock.sh).
# shellcheck source=../setup_lock.sh
. "$(dirname "${BASH_SOURCE[0]}")/../setup_lock.sh"
export_env() { export MPIV_SLURM=$dir; }
run() { run_set_up "${MPIV_SLURM_LOCK_WAIT:-600}" "another private Slurm" "$@"; }

case "${1-}" in
run)
    shift
    [ $# -gt 0 ] || die "usage: $0 run CMD [ARGS...]"
    run "$@"
    ;;
down)
    down
    ;;
probe)
    probe
    ;;
*)
    echo "usage: $0 run CMD... | down | probe" >&2
    exit 2
    ;;
esac
