#!/bin/sh
# variants.sh: tests that stress the engine's other configurations under pml mpiv:
#   - back-pressure: 4-slot queues, 8 packets of 64 bytes, ticket TLP lock (every path
#     through the outbound list, packets held by unexpected messages);
#   - a communication-server thread, three endpoints per process, P-HMCS-MCS lock.
# Runs a few test/mpi programs through run.sh for each; environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
for config in \
    "--mca pml_mpiv_lock ticket --mca pml_mpiv_eager_limit 64 --mca pml_mpiv_queue_slots 4 --mca pml_mpiv_packet_count 8" \
    "--mca pml_mpiv_progress server --mca pml_mpiv_workers 3 --mca pml_mpiv_lock hmcs"; do
    for test in "p2p_sizes 2" "wildcards 3" "mt_stress 2" "ult 2" "ssend 2"; do
        set -- $test
        if MPIV_TEST_MPIRUN_ARGS="$config" "$here/run.sh" "$1" "$2" >/dev/null 2>&1; then
            echo "PASS $1 with $config"
        else
            echo "FAIL $1 with $config (rerun: MPIV_TEST_MPIRUN_ARGS=\"$config\" run.sh $1 $2)"
            status=1
        fi
    done
done
exit $status
