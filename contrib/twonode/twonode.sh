#!/bin/bash
# twonode.sh: two "nodes" on one machine, for multi-node MPI tests without a cluster.
#
#   twonode.sh run CMD [ARGS...]   set up the two nodes, run CMD (on the host, with the
#                                  variables below exported), tear everything down, exit
#                                  with CMD's status; the usual way to use this script
#   twonode.sh exec NODE CMD...    run CMD inside NODE (its network, hostname and hosts file);
#                                  NODE is a hostname or an address of one of the two nodes
#   twonode.sh up | down           set up / tear down by hand (down also removes a set-up
#                                  left by a killed run); `up` does not hold the lock, so
#                                  use `run` in scripts
#   twonode.sh probe               exit 0 if this machine allows the set-up, else say why
#                                  and exit 77
#
# A node is a network namespace joined to a persistent UTS namespace (its own hostname):
#   node  hostname  network namespace  interface  address
#   A     mpiv-a    mpiv-a             mpiv0      10.77.0.1/24
#   B     mpiv-b    mpiv-b             mpiv0      10.77.0.2/24
# The two mpiv0 are the ends of one veth pair, so the interface has the same name on both
# nodes (UCX_NET_DEVICES=mpiv0, --mca btl_tcp_if_include mpiv0). `lo` is up on both. The
# nodes still share the filesystem, /dev/shm and the PID namespace, as a cluster with a
# shared home would share its files; Open MPI tells nodes apart by hostname.
#
# Name resolution: every command entered through `exec` runs in a mount namespace of its own
# in which /etc/hosts is a private copy with the two nodes added (a bind mount that
# disappears with the processes), so the machine's /etc/hosts is never edited.
#
# Exported to CMD by `run` (and usable after `up`):
#   MPIV_TWONODE          this script (`$MPIV_TWONODE exec mpiv-a ...`)
#   MPIV_TWONODE_AGENT    the rsh agent for `mpirun --mca plm_rsh_agent`
#   MPIV_TWONODE_HOSTS    "mpiv-a mpiv-b"
#   MPIV_TWONODE_IFACE    mpiv0
#   MPIV_TWONODE_NET      10.77.0.0/24
#
# Everything created lives under $state (namespaces' mount points, the hosts copy, a record
# of what was created), so `down` knows what to remove even after a run was killed. One set-up
# exists at a time on a machine: `run` takes a lock (waiting up to MPIV_TWONODE_LOCK_WAIT
# seconds, default 600) and, holding it, treats any set-up it finds as stale.
# Requires root, iproute2 (ip netns, veth) and util-linux (unshare, nsenter).
set -euo pipefail

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
agent=$(dirname "$self")/rsh-agent.sh
state=/run/mpiv-twonode
lockfile=/run/mpiv-twonode.lock
iface=mpiv0
net=10.77.0.0/24
hosts=(mpiv-a mpiv-b)
addrs=(10.77.0.1 10.77.0.2)
# veth ends get these names in the host's namespace until they are moved into the nodes.
veth_tmp=(mpivtw-a mpivtw-b)

say() { echo "twonode: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}
# forbidden WHAT: the machine passed probe but refuses a namespace operation all the same (a
# container may allow unshare but not bind mounts of namespaces): a skip, not a failure.
forbidden() {
    echo "twonode: this machine does not allow it: $*"
    exit 77
}

# node_index NAME: 0 or 1 for a node's hostname or address; fails for anything else.
node_index() {
    local i
    for i in 0 1; do
        if [ "$1" = "${hosts[$i]}" ] || [ "$1" = "${addrs[$i]}" ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

# probe: can this machine set up namespaces? Prints the reason and returns 77 if not.
probe() {
    local tool
    if [ "$(id -u)" -ne 0 ]; then
        echo "twonode: needs root (network namespaces, veth pairs, bind mounts)"
        return 77
    fi
    for tool in ip unshare nsenter mount umount flock; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "twonode: $tool is not installed (iproute2, util-linux)"
            return 77
        fi
    done
    if ! ip netns list >/dev/null 2>&1; then
        echo "twonode: 'ip netns' does not work here"
        return 77
    fi
    # A throw-away namespace of each kind the set-up needs (nothing persistent is created).
    if ! unshare --net --uts --mount true 2>/dev/null; then
        echo "twonode: unshare --net --uts --mount fails (namespaces are not allowed here)"
        return 77
    fi
    if ! unshare --net sh -c 'ip link add mpivtw-p type veth peer name mpivtw-q' 2>/dev/null; then
        echo "twonode: cannot create a veth pair (no veth support in the kernel?)"
        return 77
    fi
    return 0
}

# down: removes everything `up` created, or what a killed run left of it. Each step is
# tolerant: a half-built set-up must be removable too.
down() {
    local i pids
    for i in 0 1; do
        # Processes left inside a node (orted, ranks of a killed run) would keep its
        # namespaces alive; they were all started by this set-up.
        pids=$(ip netns pids "${hosts[$i]}" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            say "killing processes left in ${hosts[$i]}: ${pids//$'\n'/ }"
            # Word splitting of the pid list is intended.
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                pids=$(ip netns pids "${hosts[$i]}" 2>/dev/null || true)
                [ -z "$pids" ] && break
                sleep 0.2
            done
            if [ -n "$pids" ]; then
                # shellcheck disable=SC2086
                kill -KILL $pids 2>/dev/null || true
            fi
        fi
        if [ -e "/run/netns/${hosts[$i]}" ]; then
            ip netns del "${hosts[$i]}" 2>/dev/null || say "warning: cannot delete netns ${hosts[$i]}"
        fi
        # A run killed between creating the veth pair and moving it leaves it here.
        if ip link show "${veth_tmp[$i]}" >/dev/null 2>&1; then
            ip link del "${veth_tmp[$i]}" 2>/dev/null || true
        fi
        if [ -e "$state/uts-$i" ]; then
            umount "$state/uts-$i" 2>/dev/null || true
            rm -f "$state/uts-$i"
        fi
    done
    # What Open MPI leaves when its processes are killed (a timeout, an interrupted run): the
    # session directories and vader's segments carry the nodes' hostnames, which only this
    # set-up uses.
    for i in 0 1; do
        rm -rf "${TMPDIR:-/tmp}/ompi.${hosts[$i]}."* "/tmp/ompi.${hosts[$i]}."* \
            "/dev/shm/vader_segment.${hosts[$i]}."*
    done
    # `ip netns add` makes /run/netns a mount point when it is not one; undo that if this
    # set-up caused it and no other namespace lives there now.
    if [ -e "$state/made-run-netns" ] && [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
        umount /run/netns 2>/dev/null || true
        rmdir /run/netns 2>/dev/null || true
    fi
    rm -rf "$state"
}

up() {
    local i link
    probe >&2 || exit $?
    if [ -e "$state" ] || [ -e "/run/netns/${hosts[0]}" ] || [ -e "/run/netns/${hosts[1]}" ]; then
        say "removing a set-up left by an earlier run"
        down
    fi
    mkdir -p "$state"
    mountpoint -q /run/netns 2>/dev/null || touch "$state/made-run-netns"
    for i in 0 1; do
        # Persistent UTS namespace: unshare binds it to a file, and the hostname set inside
        # stays with it.
        touch "$state/uts-$i"
        unshare --uts="$state/uts-$i" hostname "${hosts[$i]}" ||
            forbidden "cannot create a persistent UTS namespace (unshare --uts=FILE)"
        ip netns add "${hosts[$i]}" || forbidden "cannot create a network namespace (ip netns add)"
        ip -n "${hosts[$i]}" link set lo up
    done
    ip link add "${veth_tmp[0]}" type veth peer name "${veth_tmp[1]}" ||
        forbidden "cannot create a veth pair"
    for i in 0 1; do
        ip link set "${veth_tmp[$i]}" netns "${hosts[$i]}"
        ip -n "${hosts[$i]}" link set "${veth_tmp[$i]}" name "$iface"
        ip -n "${hosts[$i]}" addr add "${addrs[$i]}/24" dev "$iface"
        ip -n "${hosts[$i]}" link set "$iface" up
    done
    # The private hosts file: the machine's entries plus the two nodes.
    {
        cat /etc/hosts
        echo "# mpiv twonode (private copy: $self)"
        for i in 0 1; do
            echo "${addrs[$i]} ${hosts[$i]}"
        done
    } >"$state/hosts"
    # Check each node: its hostname, that it resolves the other, and that the link is up.
    for i in 0 1; do
        local got other=$((1 - i))
        got=$(node_exec "${hosts[$i]}" sh -c 'hostname; getent hosts '"${hosts[$other]}") ||
            die "cannot enter node ${hosts[$i]}"
        case "$got" in
        "${hosts[$i]}"*"${addrs[$other]}"*) ;;
        *) die "node ${hosts[$i]} is not set up as expected: ${got//$'\n'/ }" ;;
        esac
    done
    (node_exec "${hosts[0]}" test -e "/sys/class/net/$iface") ||
        say "warning: /sys/class/net of a node lacks $iface (sysfs not remounted): UCX cannot use it"
    link=$(ip -n "${hosts[0]}" link show "$iface")
    [[ $link == *"state UP"* ]] || die "the link $iface is not up: $link"
    say "up: ${hosts[0]} (${addrs[0]}) and ${hosts[1]} (${addrs[1]}) joined by $iface"
}

# node_exec NODE CMD...: CMD inside NODE. A new mount namespace (unshare's default
# propagation is private, so nothing leaks to the host) gets the private hosts file; then
# nsenter joins the node's network and UTS namespaces. It also gets a sysfs of its own:
# /sys/class/net shows the interfaces of the network namespace that mounted sysfs, and UCX
# finds its TCP devices there (with the machine's /sys it offers only `lo`, and
# UCX_NET_DEVICES=mpiv0 is "not available"). Where that mount is refused, the machine's stays
# (up warns): ob1's tcp works, UCX over mpiv0 does not.
node_exec() {
    local i
    i=$(node_index "$1") || die "unknown node '$1' (nodes: ${hosts[*]})"
    shift
    [ -e "$state/hosts" ] || die "the nodes are not set up (twonode.sh up)"
    # $0 and $@ belong to the inner shell.
    # shellcheck disable=SC2016
    exec unshare --mount -- nsenter --net="/run/netns/${hosts[$i]}" --uts="$state/uts-$i" -- \
        sh -c 'mount --bind "$0" /etc/hosts && { mount -t sysfs sysfs /sys 2>/dev/null || :; } &&
            exec "$@"' "$state/hosts" "$@"
}

export_env() {
    export MPIV_TWONODE=$self MPIV_TWONODE_AGENT=$agent MPIV_TWONODE_HOSTS="${hosts[*]}" \
        MPIV_TWONODE_IFACE=$iface MPIV_TWONODE_NET=$net
}

# run, the set-up lock and the end of run (contrib/setup_lock.sh).
# shellcheck source=../setup_lock.sh
. "$(dirname "${BASH_SOURCE[0]}")/../setup_lock.sh"
run() { run_set_up "${MPIV_TWONODE_LOCK_WAIT:-600}" "another two-node set-up" "$@"; }

case "${1-}" in
run)
    shift
    [ $# -gt 0 ] || die "usage: $0 run CMD [ARGS...]"
    run "$@"
    ;;
exec)
    shift
    [ $# -ge 2 ] || die "usage: $0 exec NODE CMD [ARGS...]"
    node_exec "$@"
    ;;
up)
    up
    ;;
down)
    down
    ;;
probe)
    probe
    ;;
*)
    echo "usage: $0 run CMD... | exec NODE CMD... | up | down | probe" >&2
    exit 2
    ;;
esac
