#!/bin/sh
# single_copy.sh: mpiv where the receiver cannot read the sender's memory (CMA denied).
#   - pml_mpiv_single_copy none: the point-to-point tests, every message above the eager
#     limit copied through shared memory (data checked by each program);
#   - under no_cma (a seccomp filter: process_vm_readv fails with EPERM), auto mode: the
#     same tests, and verbose level 1 names each peer that denies CMA;
#   - under no_cma with pml_mpiv_single_copy cma: mpiv declines, `--mca pml mpiv,ob1`
#     runs the job on ob1, and `--mca pml mpiv` alone fails cleanly (no hang);
#   - without the filter, auto mode reads with CMA (no two-copy line at verbose level 1).
# Environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top_builddir=${MPIV_TEST_TOP_BUILDDIR:-$(pwd)}
no_cma=$top_builddir/test/mpi/no_cma
[ "${MPIV_TEST_PML:-mpiv}" = mpiv ] || { echo "SKIP: mpiv only"; exit 77; }
if [ ! -x "$no_cma" ]; then
    echo "FAIL: $no_cma not built (make check builds it)"
    exit 1
fi
if ! "$no_cma" true; then
    echo "SKIP: seccomp filters are not allowed here"
    exit 77
fi
status=0
log=${TMPDIR:-/tmp}/mpiv-single-copy.$$
trap 'rm -f "$log"' EXIT
tests="p2p_sizes:2 datatypes:2 wildcards:3 probe:2 cancel:2 ssend:2 bsend:2 persistent:2
truncate:2 self:2 request_free:2 status_error:2 mt_stress:2 mt_sizes:2 waitany_reuse:2
hol_block:3 ult:2 collectives:4"

run_set() { # description, then the environment assignments for run.sh
    what=$1
    shift
    for t in $tests; do
        name=${t%:*} np=${t#*:}
        if env "$@" "$here/run.sh" "$name" "$np" >"$log" 2>&1; then
            echo "PASS $name $what"
        else
            cat "$log"
            echo "FAIL $name $what"
            status=1
        fi
    done
}

# 1. Two copies by choice.
run_set "with pml_mpiv_single_copy none" \
    MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_single_copy none"
# With a 64-byte eager limit nearly every size of p2p_sizes takes the two-copy path:
if env MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_single_copy none --mca pml_mpiv_eager_limit 64" \
    "$here/run.sh" p2p_sizes 2 >"$log" 2>&1; then
    echo "PASS p2p_sizes with two copies from 65 bytes up"
else
    cat "$log"
    echo "FAIL p2p_sizes with two copies from 65 bytes up"
    status=1
fi

# 2. CMA denied by the kernel (seccomp), auto mode.
run_set "under no_cma (auto)" MPIV_TEST_WRAPPER="$no_cma"
if env MPIV_TEST_WRAPPER="$no_cma" MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 1" \
    "$here/run.sh" p2p_sizes 2 >"$log" 2>&1 &&
    [ "$(grep -c 'process_vm_readv (CMA) from .* is denied (Operation not permitted)' "$log")" -eq 2 ]; then
    echo "PASS verbose level 1 names each peer that denies CMA"
else
    cat "$log"
    echo "FAIL verbose level 1 does not name both peers that deny CMA"
    status=1
fi

# 3. single_copy cma where CMA is denied: decline, fall back, or fail without hanging.
if env MPIV_TEST_WRAPPER="$no_cma" MPIV_TEST_PML=mpiv,ob1 \
    MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_single_copy cma --mca pml_mpiv_verbose 1" \
    "$here/run.sh" p2p_sizes 2 >"$log" 2>&1 &&
    grep -q 'declining: shared memory or CMA' "$log"; then
    echo "PASS single_copy cma without CMA: mpiv declines, ob1 runs the job"
else
    cat "$log"
    echo "FAIL single_copy cma without CMA under --mca pml mpiv,ob1"
    status=1
fi
if env MPIV_TEST_WRAPPER="$no_cma" MPIV_TEST_TIMEOUT=60 \
    MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_single_copy cma" \
    "$here/run.sh" p2p_sizes 2 >"$log" 2>&1; then
    cat "$log"
    echo "FAIL single_copy cma without CMA under --mca pml mpiv: the job ran"
    status=1
elif grep -q 'no exit within' "$log"; then
    cat "$log"
    echo "FAIL single_copy cma without CMA under --mca pml mpiv: the job hung"
    status=1
else
    echo "PASS single_copy cma without CMA under --mca pml mpiv: the job fails"
fi

# 4. Where CMA works, auto mode uses it.
if env MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_verbose 1" "$here/run.sh" p2p_sizes 2 >"$log" 2>&1 &&
    ! grep -q 'two copies' "$log"; then
    echo "PASS auto mode reads with CMA where it is allowed"
else
    cat "$log"
    echo "FAIL auto mode with CMA allowed"
    status=1
fi
exit $status
