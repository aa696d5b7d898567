# self_run.sh: sourced by the scripts that check how a job's PML is chosen (fallback.sh,
# ucx_missing.sh). Needs $here (test/mpi), $log (an output file) and $name (the test's
# name in messages); environment as for run.sh.

# run_self PML ARGS [TIMEOUT]: the `self` program on 2 processes, output in $log.
run_self() {
    MPIV_TEST_PML=$1 MPIV_TEST_MPIRUN_ARGS=$2 MPIV_TEST_TIMEOUT=${3:-${MPIV_TEST_TIMEOUT:-}} \
        "$here/run.sh" self 2 >"$log" 2>&1
}
# fail WHAT: the output, then the failure.
fail() {
    cat "$log"
    echo "FAIL $name: $1" >&2
    exit 1
}
# expect PATTERN WHAT: the output says PATTERN, or the test fails naming WHAT.
expect() {
    grep -q "$1" "$log" || fail "$2"
}
