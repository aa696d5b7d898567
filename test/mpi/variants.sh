#!/bin/sh
# variants.sh: tests that stress the engine's other configurations under pml mpiv:
#   - back-pressure: 4-slot queues, 8 packets of 64 bytes, ticket TLP lock (every path
#     through the outbound list, packets held by unexpected messages);
#   - a communication-server thread, three endpoints per process, P-HMCS-MCS lock;
#   - single-threaded tests under MPI_THREAD_MULTIPLE (mpiv's thread-safe paths; below it
#     mpiv takes its serial paths, which verbose level 2 reports);
# comm_info at verbose level 2 (MPI_Comm_set_info assertions applied), the endpoints tests'
# other modes (16 threads, churn, below MPI_THREAD_MULTIPLE; endpoints_split by 16 threads
# and by 64 ULTs per process; endpoints_p2p's patterns in both configurations), and unexpected at verbose level 1 (the warning that messages
# pile up before their receives), and ult with the runtime's scratch-stack threshold.
# Runs a few test/mpi programs through run.sh for each; environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
for config in \
    "--mca pml_mpiv_lock ticket --mca pml_mpiv_eager_limit 64 --mca pml_mpiv_queue_slots 4 --mca pml_mpiv_packet_count 8" \
    "--mca pml_mpiv_progress server --mca pml_mpiv_workers 3 --mca pml_mpiv_lock hmcs"; do
    for test in "p2p_sizes 2" "wildcards 3" "mt_stress 2" "ult 2" "ssend 2" "hol_block 3" \
        "mt_sizes 2" "waitany_reuse 2" "bsend_threads 2" "nbc_threads 4" "endpoints 3" \
        "endpoints_ult 2" "endpoints_split 3" "endpoints_p2p 2"; do
        set -- $test
        out=${TMPDIR:-/tmp}/mpiv-variant.$$
        if MPIV_TEST_MPIRUN_ARGS="$config" "$here/run.sh" "$1" "$2" >"$out" 2>&1; then
            echo "PASS $1 with $config"
        else
            tail -n 30 "$out"
            echo "FAIL $1 with $config (rerun: MPIV_TEST_MPIRUN_ARGS=\"$config\" run.sh $1 $2)"
            status=1
        fi
        rm -f "$out"
    done
done
# ult runs its engine calls on the scratch stack and prefetches the next ULTs' stacks
# (scratch_ults and prefetch_ults 0); once more with the runtime's thresholds (below its
# scratch_ults 1000 ULTs stay on their own stacks), and once with no prefetch at all.
if MPIV_TEST_SCRATCH_ULTS=default MPIV_TEST_PREFETCH_ULTS=default "$here/run.sh" ult 2 >/dev/null 2>&1; then
    echo "PASS ult with the runtime's scratch_ults and prefetch_ults"
else
    echo "FAIL ult with the runtime's scratch_ults and prefetch_ults (rerun: MPIV_TEST_SCRATCH_ULTS=default MPIV_TEST_PREFETCH_ULTS=default run.sh ult 2)"
    status=1
fi
if MPIV_TEST_PREFETCH_ULTS=4294967295 "$here/run.sh" ult 2 >/dev/null 2>&1; then
    echo "PASS ult without the stack prefetch"
else
    echo "FAIL ult without the stack prefetch (rerun: MPIV_TEST_PREFETCH_ULTS=4294967295 run.sh ult 2)"
    status=1
fi
for test in "p2p_sizes 2" "datatypes 2" "probe 2" "cancel 2" "persistent 2" "truncate 2" \
    "request_free 2" "bsend 2" "comm_info 3" "status_error 2" "hol_block 3" "comm_churn 2"; do
    set -- $test
    if MPIV_TEST_THREAD_MULTIPLE=1 "$here/run.sh" "$1" "$2" >/dev/null 2>&1; then
        echo "PASS $1 under MPI_THREAD_MULTIPLE"
    else
        echo "FAIL $1 under MPI_THREAD_MULTIPLE (rerun: MPIV_TEST_THREAD_MULTIPLE=1 run.sh $1 $2)"
        status=1
    fi
done
# The serial paths are taken below MPI_THREAD_MULTIPLE with inline progress only.
log=${TMPDIR:-/tmp}/mpiv-variants.$$
check_serial() { # expect(yes|no) description, then run.sh's arguments
    expect=$1 what=$2
    shift 2
    if ! "$here/run.sh" "$@" >"$log" 2>&1; then
        cat "$log"
        echo "FAIL $what: the run failed"
        status=1
        return
    fi
    if grep -q 'selected candidate.*, serial' "$log"; then got=yes; else got=no; fi
    if [ "$got" = "$expect" ]; then
        echo "PASS $what"
    else
        cat "$log"
        echo "FAIL $what (serial: expected $expect, got $got)"
        status=1
    fi
}
MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 2" check_serial yes "MPI_THREAD_SINGLE is serial" p2p_sizes 2
MPIV_TEST_THREAD_MULTIPLE=1 MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 2" \
    check_serial no "MPI_THREAD_MULTIPLE is not serial" p2p_sizes 2
MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 2 --mca pml_mpiv_progress server" \
    check_serial no "a server thread is not serial" p2p_sizes 2
rm -f "$log"
# mpiv applies the assertions MPI_Comm_set_info sets on a communicator in use, each of the
# three both ways (comm_info's toggles), and says so at verbose level 2.
log=${TMPDIR:-/tmp}/mpiv-variants.$$
if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 2" "$here/run.sh" comm_info 2 >"$log" 2>&1; then
    missing=
    for key in mpi_assert_no_any_source mpi_assert_no_any_tag mpi_assert_allow_overtaking; do
        for value in true false; do
            grep -q "$key = $value applied" "$log" || missing="$missing $key=$value"
        done
    done
    if [ -z "$missing" ]; then
        echo "PASS comm_info: MPI_Comm_set_info assertions applied both ways"
    else
        cat "$log"
        echo "FAIL comm_info: no 'applied' message at verbose level 2 for:$missing"
        status=1
    fi
else
    cat "$log"
    echo "FAIL comm_info at verbose level 2"
    status=1
fi
rm -f "$log"
# Endpoints driven by 16 pthreads per process.
if "$here/run.sh" endpoints 2 wide >"$log" 2>&1; then
    echo "PASS endpoints with 16 threads per process"
else
    cat "$log"
    echo "FAIL endpoints with 16 threads per process (rerun: run.sh endpoints 2 wide)"
    status=1
fi
# Endpoints communicators created and freed by 4 threads at once on different parents.
if "$here/run.sh" endpoints 2 churn >"$log" 2>&1; then
    echo "PASS endpoints created and freed by 4 threads at once"
else
    cat "$log"
    echo "FAIL endpoints churn (rerun: run.sh endpoints 2 churn)"
    status=1
fi
# MPI_Comm_split and friends on endpoints handles, by 16 pthreads and by 64 ULTs per process.
for mode in wide ult; do
    if "$here/run.sh" endpoints_split 2 $mode >"$log" 2>&1; then
        echo "PASS endpoints_split $mode"
    else
        cat "$log"
        echo "FAIL endpoints_split $mode (rerun: run.sh endpoints_split 2 $mode)"
        status=1
    fi
done
# MPIX_Comm_create_endpoints below MPI_THREAD_MULTIPLE: MPI_ERR_OTHER.
if "$here/run.sh" endpoints 3 single >"$log" 2>&1; then
    echo "PASS endpoints below MPI_THREAD_MULTIPLE: MPI_ERR_OTHER"
else
    cat "$log"
    echo "FAIL endpoints below MPI_THREAD_MULTIPLE (rerun: run.sh endpoints 3 single)"
    status=1
fi
# 100,000 messages held before their receives: one warning at verbose level 1.
if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 1" "$here/run.sh" unexpected 2 >"$log" 2>&1 &&
    [ "$(grep -c 'messages arrived before their receives' "$log")" -eq 1 ]; then
    echo "PASS unexpected: one warning at verbose level 1"
else
    cat "$log"
    echo "FAIL unexpected: expected one warning at verbose level 1 that messages pile up"
    status=1
fi
rm -f "$log"
exit $status
