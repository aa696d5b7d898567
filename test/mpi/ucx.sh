#!/bin/bash
# ucx: the whole test/mpi suite with every peer on the UCX network transport
# (pml_mpiv_transports ucx, UCX over TCP on the loopback interface), checking from the
# verbose output that each process reached each other process over UCX.
# The programs and process counts are those of make check (local.mk's wrapper lists:
# NAME-npN.sh, and abort_MODE-npN.sh for the runs that must end the job).
# Exit 77 (skip) when this mpiv was built without UCX. Environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
args="--mca pml_mpiv_transports ucx --mca pml_mpiv_verbose 2 -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo"
out=${TMPDIR:-/tmp}/mpiv-ucx.$$
trap 'rm -f "$out"' EXIT

# The wrapper names of the program runs, in local.mk's order (not the script tests).
runs=$(sed -n '/_tests = \\$/,/^$/p' "$here/local.mk" | grep -o '%reldir%/[a-z0-9_]*-np[0-9]*\.sh' |
    sed 's|%reldir%/||; s|\.sh$||')
if [ -z "$runs" ]; then
    echo "FAIL: no program runs found in $here/local.mk"
    exit 1
fi
for run in $runs; do
    name=${run%-np*}
    np=${run##*-np}
    case $name in
    abort_*) set -- --expect-abort abort "$np" "${name#abort_}" ;;
    *) set -- "$name" "$np" ;;
    esac
    if MPIV_TEST_MPIRUN_ARGS="$args" "$here/run.sh" "$@" >"$out" 2>&1; then
        # Each process names every other peer as reached over UCX.
        want=$((np * (np - 1)))
        got=$(grep -c "pml mpiv: peer .*: over UCX" "$out")
        if [ "$got" -ge "$want" ]; then
            echo "PASS $run over UCX ($got peer lines)"
            continue
        fi
        tail -n 20 "$out"
        echo "FAIL $run: $got 'over UCX' peer lines, expected $want"
    elif grep -q "built without UCX" "$out"; then
        echo "SKIP: this mpiv was built without UCX"
        exit 77
    else
        tail -n 30 "$out"
        echo "FAIL $run over UCX (rerun: MPIV_TEST_MPIRUN_ARGS=\"$args\" run.sh $*)"
    fi
    status=1
done
exit $status
