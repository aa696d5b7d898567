#!/bin/sh
# stats.sh: mpiv's observability under pml mpiv:
#   - mpit: every counter is an MPI_T performance variable, and known traffic changes
#     them by exactly what it should, over shared memory and over UCX;
#   - pml_mpiv_stats 1 and 2: each process prints its non-zero counters at MPI_Finalize,
#     one line each ("pml mpiv stats: rank R: NAME VALUE UNIT", per thread at 2);
#   - pml_mpiv_verbose 2 states the placement: the process binding, progress (server PU or
#     inline), the lock kind, the transport and copy mode of each peer, and (a program
#     with ULTs) each ULT worker's PU.
# Environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ "${MPIV_TEST_PML:-mpiv}" = mpiv ] || { echo "SKIP: mpiv only"; exit 77; }
status=0
log=${TMPDIR:-/tmp}/mpiv-stats.$$
trap 'rm -f "$log"' EXIT

if "$here/run.sh" mpit 2 >"$log" 2>&1; then
    echo "PASS mpit: MPI_T performance variables"
else
    cat "$log"
    echo "FAIL mpit"
    status=1
fi
# The same traffic over the UCX transport: the ucx_* counters take it.
if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_transports ucx -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo" \
    "$here/run.sh" mpit 2 ucx >"$log" 2>&1; then
    echo "PASS mpit ucx: MPI_T performance variables, traffic over UCX"
elif grep -q "built without UCX" "$log"; then
    echo "SKIP mpit ucx: this mpiv was built without UCX"
else
    cat "$log"
    echo "FAIL mpit ucx"
    status=1
fi

for level in 1 2; do
    if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_stats $level" "$here/run.sh" p2p_sizes 2 >"$log" 2>&1; then
        line='pml mpiv stats: rank [01]: sent_rendezvous +[0-9]+ messages'
        [ "$level" = 2 ] && line="$line \\[[0-9]+ \\| [0-9]+( [0-9]+)*\\]"
        bad=$(grep 'pml mpiv stats: rank [01]: ' "$log" |
            grep -Ev ': [a-z_]+ +[0-9]+ [a-z-]+( \[[0-9]+ \| [0-9]+( [0-9]+)*( \.\.\.)?\])?$' || true)
        if [ "$(grep -cE "$line" "$log")" -eq 2 ] && [ -z "$bad" ] &&
            [ "$(grep -c 'pml mpiv stats: rank [01]: unexpected_max' "$log")" -eq 2 ] &&
            [ "$(grep -cE 'pml mpiv stats: rank [01]: posted_max +[1-9][0-9]* receives' "$log")" -eq 2 ]; then
            echo "PASS pml_mpiv_stats $level: the summary of each process"
        else
            cat "$log"
            echo "FAIL pml_mpiv_stats $level: summary lines missing or malformed: $bad"
            status=1
        fi
    else
        cat "$log"
        echo "FAIL p2p_sizes with pml_mpiv_stats $level"
        status=1
    fi
done

if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 2" "$here/run.sh" p2p_sizes 2 >"$log" 2>&1 &&
    [ "$(grep -cE 'selected candidate: .*bound to PUs [0-9].*progress (inline|server).*lock (mcs|hmcs|ticket)' "$log")" -eq 2 ] &&
    [ "$(grep -cE 'peer .*: shared memory, (single copy \(process_vm_readv\)|two copies|this process)' "$log")" -ge 4 ]; then
    echo "PASS pml_mpiv_verbose 2 states the placement and each peer's transport"
else
    cat "$log"
    echo "FAIL pml_mpiv_verbose 2 placement lines"
    status=1
fi

# The ULT workers' placement, scratch-stack and prefetch thresholds (ult sets both 0),
# once the program starts mpiv's runtime.
if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 2" "$here/run.sh" ult 2 >"$log" 2>&1 &&
    [ "$(grep -cE 'mpiv_init: [0-9]+ ULT workers: worker 0 on PU [0-9]+ \(scratch stack from 0 live ULTs, stack prefetch from 0 live ULTs\)' "$log")" -eq 2 ]; then
    echo "PASS pml_mpiv_verbose 2 states the ULT workers' PUs, scratch-stack and prefetch thresholds"
else
    cat "$log"
    echo "FAIL pml_mpiv_verbose 2: no line on the ULT workers"
    status=1
fi
exit $status
