#!/bin/bash
# check.sh: MPI tests across two nodes on one machine (twonode.sh), run by `make check`.
#
#   1. Where ranks run: `procname` at np 4 (2 per node, round robin) under ob1 with
#      `btl self,vader,tcp` must show ranks 0 and 2 on mpiv-a, 1 and 3 on mpiv-b, 2 ranks
#      per node, tcp connections only over the nodes' link and vader only within a node.
#   2. ob1 across the nodes: test/mpi programs through run.sh under
#      `--mca pml ob1 --mca btl self,vader,tcp` must pass.
#   3. mpiv across the nodes: the same programs under `--mca pml mpiv,ob1` with
#      `pml_mpiv_verbose 2` must pass, and each run's output must show what mpiv does with
#      a job spanning nodes (mpiv runs it, over UCX between the nodes and shared memory
#      within each; see check_mpiv_multinode, the one place that expectation lives).
#   4. No usable UCX (UCX_TLS naming no transport): every rank declines with its reason
#      and ob1 runs the job.
#
# The programs and their process counts: p2p_sizes, wildcards, collectives, probe at np 4;
# mt_stress at np 2 (it takes exactly 2; one rank per node); abort (MPI_Abort and SIGKILL at
# np 4: the job must end within 30 s although ranks on the other node block). Ranks are
# mapped round robin over the nodes (--map-by node), so that the ranks 0 and 1, between
# which p2p_sizes and probe send, are on different nodes. `ult` is left out while ob1 runs
# the job: a blocking ob1 call in a ULT blocks its worker and the job hangs.
#
# Environment as for test/mpi/run.sh (MPIV_TEST_TOP_BUILDDIR, MPIV_TEST_MPIRUN, ...), and
#   MPIV_TWONODE_TIMEOUT  seconds before one run counts as hung (default 120)
#   MPIV_TWONODE_EXPECT   what mpiv does with a multi-node job: ucx (default) or declines
# Exits 77 (automake: SKIP) when this machine does not allow the set-up (not root, no
# network namespaces), with the reason.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
# Set up the nodes around this script: twonode.sh runs it again with MPIV_TWONODE set, and
# tears the nodes down however it ends.
if [ -z "${MPIV_TWONODE:-}" ]; then
    exec "$here/twonode.sh" run "$0" "$@"
fi

run_sh=$src/test/mpi/run.sh
top_builddir=${MPIV_TEST_TOP_BUILDDIR:-$(pwd)}
mpirun=${MPIV_TEST_MPIRUN:-mpirun}
time_limit=${MPIV_TWONODE_TIMEOUT:-120}
read -r node_a node_b <<<"$MPIV_TWONODE_HOSTS"
iface=$MPIV_TWONODE_IFACE
net_prefix=${MPIV_TWONODE_NET%.0/*}. # 10.77.0.

# The expectation for mpiv on a job spanning nodes: with the UCX transport (the default
# pml_mpiv_transports shm,ucx) every rank selects mpiv and reaches its peers on the other
# node over UCX and those on its own node over shared memory (checked from the verbose-2
# lines); `declines` is what a build without UCX, or a node without UCX's library, does
# (every rank says why, on stderr and at verbose level 1, and `--mca pml mpiv,ob1` runs the
# job on ob1).
mpiv_multinode=${MPIV_TWONODE_EXPECT:-ucx}
decline_message="pml mpiv: declining: the job spans several nodes"
ucx_peer_pattern="pml mpiv: peer .*: .*UCX"

# check_mpiv_multinode LOG COUNT: the run in LOG shows the expected behaviour of mpiv, from
# at least COUNT processes (each prints its own line). Prints one line of evidence, or what
# is wrong and fails.
check_mpiv_multinode() {
    local log=$1 count=$2 n
    case "$mpiv_multinode" in
    declines)
        n=$(grep -c "$decline_message" "$log" || true)
        if [ "$n" -lt "$count" ]; then
            echo "expected '$decline_message' from $count processes, found $n"
            return 1
        fi
        if grep -q "pml mpiv: selected candidate" "$log"; then
            echo "mpiv was selected although it should decline a job spanning nodes"
            return 1
        fi
        echo "$n x $(grep -m1 -o "$decline_message.*" "$log")"
        ;;
    ucx)
        n=$(grep -c "pml mpiv: selected candidate" "$log" || true)
        if [ "$n" -lt "$count" ]; then
            echo "expected mpiv selected by $count processes, found $n"
            return 1
        fi
        if grep -q "pml mpiv: declining" "$log"; then
            echo "mpiv declined: $(grep -m1 'pml mpiv: declining' "$log")"
            return 1
        fi
        # Ranks go round robin over the two nodes (even ranks on node A): each peer line
        # "[HOST:pid] pml mpiv: peer [[job,1],RANK]: ..." must name a peer on the other
        # node when it says UCX, and on its own node when it says shared memory. Peers
        # are connected on first use, so not every pair has a line.
        local wrong ucx
        wrong=$(grep -E "pml mpiv: peer \[\[[0-9]+,[0-9]+\],[0-9]+\]: " "$log" |
            awk -v a="$node_a" '{
                host = $1; sub(/^\[/, "", host); sub(/:.*/, "", host)
                if (!match($0, /\],[0-9]+\]: /)) next
                peer = substr($0, RSTART + 2, RLENGTH - 5)
                same = ((peer % 2 == 0) == (host == a))
                ucx = ($0 ~ /UCX/)
                if (ucx == same) print
            }')
        if [ -n "$wrong" ]; then
            echo "a peer on the wrong transport: $wrong"
            return 1
        fi
        ucx=$(grep -c "$ucx_peer_pattern" "$log" || true)
        if [ "$ucx" -eq 0 ]; then
            echo "no peer reached over UCX ('$ucx_peer_pattern')"
            return 1
        fi
        echo "$n x selected, $ucx peers over UCX; $(grep -m1 -o "$ucx_peer_pattern" "$log")"
        ;;
    *)
        echo "MPIV_TWONODE_EXPECT must be declines or ucx, not '$mpiv_multinode'"
        return 1
        ;;
    esac
}

# mpirun's arguments for a job on both nodes: the agent enters node B, Open MPI's
# out-of-band and tcp traffic stay on the nodes' link, and UCX (once mpiv uses it) too.
export UCX_NET_DEVICES=$iface
common="--host $node_a:2,$node_b:2 --map-by node --mca plm_rsh_agent $MPIV_TWONODE_AGENT"
common="$common --mca oob_tcp_if_include $iface --mca btl_tcp_if_include $iface"
common="$common --mca btl self,vader,tcp -x UCX_NET_DEVICES"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

log=$(mktemp "${TMPDIR:-/tmp}/mpiv-twonode.XXXXXX")
trap 'rm -f "$log"' EXIT
status=0
start=$SECONDS
fail() {
    cat "$log"
    echo "FAIL $*"
    status=1
}

# in_node_a CMD...: CMD inside node A, where mpirun runs (so node A is local to it).
in_node_a() {
    "$MPIV_TWONODE" exec "$node_a" "$@"
}

# ---------------------------------------------------------------- 1. placement and btls
if ! [ -x "$top_builddir/contrib/twonode/procname" ]; then
    echo "FAIL: $top_builddir/contrib/twonode/procname not found (make check builds it)"
    exit 99
fi
echo "+ $mpirun $common --oversubscribe -np 4 --mca pml ob1 --mca btl_base_verbose 100 procname"
# Word splitting of $common is intended here and below.
# shellcheck disable=SC2086
if in_node_a timeout --kill-after=10 "$time_limit" "$mpirun" $common --oversubscribe -np 4 \
    --mca pml ob1 --mca btl_base_verbose 100 "$top_builddir/contrib/twonode/procname" \
    >"$log" 2>&1; then
    problems=
    for rank in 0 1 2 3; do
        host=$node_a
        [ $((rank % 2)) -eq 1 ] && host=$node_b
        grep -q "^procname: rank $rank of 4 on $host, 2 ranks on its node" "$log" ||
            problems="$problems; rank $rank is not on $host with 2 ranks on its node"
    done
    grep -q "^PASS procname" "$log" || problems="$problems; the ring failed"
    # tcp between the nodes, over their link only.
    grep -q "btl:tcp: now connected to $net_prefix" "$log" ||
        problems="$problems; no tcp connection over $iface"
    outside=$(grep "btl: tcp: attempting to connect() to" "$log" | grep -v "address $net_prefix" ||
        true)
    [ -z "$outside" ] || problems="$problems; tcp connected outside $iface: $outside"
    # vader only within a node: "[HOST:pid] mca: bml: Using vader btl for send to ... on node
    # PEERHOST" must name the same host twice.
    grep -q "Using vader btl for send to .* on node" "$log" ||
        problems="$problems; vader is not used within a node"
    between=$(grep "Using vader btl for send to" "$log" |
        grep -v -E '^\[([^:]+):[0-9]+\] .* on node \1$' || true)
    [ -z "$between" ] || problems="$problems; vader is used between nodes: $between"
    if [ -z "$problems" ]; then
        grep '^procname: ' "$log"
        echo "PASS placement: 2 ranks per node, tcp over $iface between nodes, vader within"
    else
        fail "placement${problems}"
    fi
else
    fail "procname across the nodes did not run (exit $?)"
fi

# ---------------------------------------------------------------- 2. and 3. the tests
tests=("p2p_sizes 4" "wildcards 4" "collectives 4" "probe 4" "mt_stress 2")
abort_tests=("4 mpi" "4 kill")
# mpiv's ULTs block only their ULT in mpiv's own calls; once mpiv runs the job, test them.
mpiv_tests=("${tests[@]}")
[ "$mpiv_multinode" = declines ] || mpiv_tests+=("ult 2")

# run_test PML EXTRA_ARGS [--expect-abort] NAME NP [ARGS]: run.sh inside node A, output in
# $log.
run_test() {
    local pml=$1 extra=$2
    shift 2
    MPIV_TEST_PML=$pml MPIV_TEST_MPIRUN_ARGS="$common $extra" MPIV_TEST_TIMEOUT=$time_limit \
        in_node_a "$run_sh" "$@" >"$log" 2>&1
}

for test in "${tests[@]}"; do
    # shellcheck disable=SC2086
    if run_test ob1 "" $test; then
        echo "PASS ob1 across nodes: $test ($(tail -n1 "$log"))"
    else
        fail "ob1 across nodes: $test"
    fi
done
for test in "${abort_tests[@]}"; do
    # shellcheck disable=SC2086
    if run_test ob1 "" --expect-abort abort $test; then
        echo "PASS ob1 across nodes: abort $test"
    else
        fail "ob1 across nodes: abort $test"
    fi
done

mpiv_args="--mca pml_mpiv_verbose 2"
for test in "${mpiv_tests[@]}"; do
    # shellcheck disable=SC2086
    if ! run_test mpiv,ob1 "$mpiv_args" $test; then
        fail "mpiv,ob1 across nodes: $test"
    elif ! why=$(check_mpiv_multinode "$log" "${test#* }"); then
        fail "mpiv,ob1 across nodes: $test passed, but $why"
    else
        echo "PASS mpiv,ob1 across nodes ($mpiv_multinode): $test ($(tail -n1 "$log"); $why)"
    fi
done
for test in "${abort_tests[@]}"; do
    # Processes of an aborted job may end before their output is forwarded: one line will do.
    # shellcheck disable=SC2086
    if ! run_test mpiv,ob1 "$mpiv_args" --expect-abort abort $test; then
        fail "mpiv,ob1 across nodes: abort $test"
    elif ! why=$(check_mpiv_multinode "$log" 1); then
        fail "mpiv,ob1 across nodes: abort $test ended the job, but $why"
    else
        echo "PASS mpiv,ob1 across nodes ($mpiv_multinode): abort $test ($why)"
    fi
done
# ---------------------------------------------------------------- 4. UCX unusable
# With no usable UCX transport (UCX_TLS names none) mpiv cannot reach the other node: every
# rank declines with its reason, and ob1 runs the job.
if [ "$mpiv_multinode" = ucx ]; then
    unusable="pml mpiv: declining: .*UCX transport cannot start"
    if ! run_test mpiv,ob1 "$mpiv_args -x UCX_TLS=nosuchtransport" p2p_sizes 4; then
        fail "mpiv,ob1 across nodes without a usable UCX: p2p_sizes 4"
    elif [ "$(grep -c "$unusable" "$log" || true)" -lt 4 ] ||
        grep -q "pml mpiv: selected candidate" "$log"; then
        fail "mpiv,ob1 across nodes without a usable UCX: expected 4 x '$unusable' and ob1"
    else
        echo "PASS mpiv,ob1 across nodes without a usable UCX: 4 x declined, ob1 ran p2p_sizes"
    fi
fi
echo "two-node tests: $([ $status -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit $status
