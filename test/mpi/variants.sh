#!/bin/sh
# variants.sh: tests that stress the engine's other configurations under pml mpiv:
#   - back-pressure: 4-slot queues, 8 packets of 64 bytes, ticket TLP lock (every path
#     through the outbound list, packets held by unexpected messages);
#   - a communication-server thread, three endpoints per process, P-HMCS-MCS lock;
# and comm_info at verbose level 1 (the message about MPI_Comm_set_info assertions).
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
# Assertions set with MPI_Comm_set_info on an existing communicator are not applied by mpiv
# (it keeps those of the communicator's creation), and it says so at verbose level 1.
log=${TMPDIR:-/tmp}/mpiv-variants.$$
if MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 1" "$here/run.sh" comm_info 2 >"$log" 2>&1 &&
   grep -q "mpi_assert_no_any_source = true set after its creation is not applied" "$log"; then
    echo "PASS comm_info says MPI_Comm_set_info assertions are not applied"
else
    cat "$log"
    echo "FAIL comm_info: no message about assertions set after creation"
    status=1
fi
rm -f "$log"
exit $status
