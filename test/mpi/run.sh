#!/bin/sh
# run.sh: runs one test/mpi program under mpirun with the PML under test.
#
#   run.sh [--expect-abort] NAME NP [ARGS...]
#
# Runs `mpirun --oversubscribe -np NP --mca pml $MPIV_TEST_PML ... test/mpi/NAME ARGS` under
# `timeout` and fails with a clear message when the time runs out (a hang is a failure).
# With --expect-abort the program is expected to kill the job: the run passes only if the
# program printed the marker EXPECTED-ABORT (it reached the point where it aborts on purpose)
# and mpirun exits non-zero within 30 s.
#
# Environment:
#   MPIV_TEST_PML          PML to select (default mpiv; ob1 validates the tests themselves)
#   MPIV_TEST_MPIRUN_ARGS  extra mpirun arguments, e.g. "--mca pml_mpiv_eager_limit 8192"
#   MPIV_TEST_WRAPPER      a program mpirun starts instead, with the test program and its
#                          arguments after it (e.g. test/mpi/no_cma)
#   MPIV_TEST_TIMEOUT      seconds before the run counts as hung (default 120)
#   MPIV_TEST_MPIRUN       mpirun to use (default: configure's OMPI_MPIRUN, else mpirun)
#   MPIV_TEST_TOP_BUILDDIR top build directory (holds test/mpi/NAME and ompi-component/.libs)
#   MPIV_TEST_OMPI_PKGLIBDIR  Open MPI's component directory (default: ask ompi_info)
#   MPIV_TEST_REQUIRE_PML  when 1, a missing mca_pml_mpiv.so fails the test instead of skipping
#   MPIV_TEST_EAGER, MPIV_TEST_ITERS, MPIV_TEST_THREADS, MPIV_TEST_TIME_MULTIPLIER,
#   MPIV_TEST_THREAD_MULTIPLE (mpi_test.h: ask for MPI_THREAD_MULTIPLE), MPIV_TEST_ULTS and
#   MPIV_TEST_SCRATCH_ULTS (ult.c) are passed on to the program.
set -u

expect_abort=no
if [ "${1-}" = --expect-abort ]; then
    expect_abort=yes
    shift
fi
if [ $# -lt 2 ]; then
    echo "usage: $0 [--expect-abort] NAME NP [ARGS...]" >&2
    exit 99
fi
name=$1
np=$2
shift 2

pml=${MPIV_TEST_PML:-mpiv}
mpirun=${MPIV_TEST_MPIRUN:-${OMPI_MPIRUN:-mpirun}}
top_builddir=${MPIV_TEST_TOP_BUILDDIR:-$(pwd)}
program=$top_builddir/test/mpi/$name
if [ "$expect_abort" = yes ]; then
    time_limit=${MPIV_TEST_TIMEOUT:-60}
else
    time_limit=${MPIV_TEST_TIMEOUT:-120}
fi

if [ ! -x "$program" ]; then
    echo "FAIL $name: program $program not found (build it with make check)" >&2
    exit 99
fi

if [ -n "${MPIV_TEST_WRAPPER:-}" ]; then
    set -- "$MPIV_TEST_WRAPPER" "$program" "$@"
else
    set -- "$program" "$@"
fi
set -- --oversubscribe -np "$np" --mca pml "$pml" "$@"
case "$pml" in
mpiv | mpiv,*)
    pkglibdir=${MPIV_TEST_OMPI_PKGLIBDIR:-}
    if [ -z "$pkglibdir" ]; then
        pkglibdir=$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
    fi
    component_dir=$top_builddir/ompi-component/.libs
    # Not $HOME/.openmpi/components: an installed copy there would shadow the build.
    component_path=$component_dir:$pkglibdir
    if [ ! -f "$component_dir/mca_pml_mpiv.so" ]; then
        echo "$name: mca_pml_mpiv.so is not in $component_path;" \
            "build ompi-component/ or set MPIV_TEST_PML=ob1" >&2
        [ "${MPIV_TEST_REQUIRE_PML:-0}" = 1 ] && exit 1
        exit 77 # automake: SKIP
    fi
    set -- --mca mca_base_component_path "$component_path" "$@"
    # an uninstalled component finds the uninstalled libmpiv here
    LD_LIBRARY_PATH=$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    set -- -x LD_LIBRARY_PATH "$@"
    ;;
ob1)
    # ob1 over shared memory only, unless the caller chose the BTLs
    case "${MPIV_TEST_MPIRUN_ARGS:-}" in
    *"mca btl "*) ;;
    *) set -- --mca btl self,vader "$@" ;;
    esac
    ;;
esac
for var in MPIV_TEST_EAGER MPIV_TEST_ITERS MPIV_TEST_THREADS MPIV_TEST_TIME_MULTIPLIER \
    MPIV_TEST_THREAD_MULTIPLE MPIV_TEST_ULTS MPIV_TEST_SCRATCH_ULTS \
    MPIV_TEST_PREFETCH_ULTS; do
    eval "value=\${$var-}"
    [ -n "$value" ] && set -- -x "$var" "$@"
done
# Word splitting of the extra arguments is intended.
# shellcheck disable=SC2086
set -- ${MPIV_TEST_MPIRUN_ARGS:-} "$@"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "+ timeout $time_limit $mpirun $*"
start=$(date +%s)
if [ "$expect_abort" = yes ]; then
    output=$(mktemp)
    timeout --kill-after=10 "$time_limit" "$mpirun" "$@" >"$output" 2>&1
    rc=$?
    cat "$output"
    grep -q EXPECTED-ABORT "$output" && marker=yes || marker=no
    rm -f "$output"
else
    timeout --kill-after=10 "$time_limit" "$mpirun" "$@"
    rc=$?
fi
elapsed=$(($(date +%s) - start))

# 124: timeout expired; 137: killed after the grace period (a killed program can give 137 too,
# hence the elapsed-time test).
if [ $rc -eq 124 ] || { [ $rc -eq 137 ] && [ "$elapsed" -ge "$time_limit" ]; }; then
    echo "FAIL $name: no exit within $time_limit s under pml $pml (hang or deadlock?)" >&2
    exit 1
fi
if [ "$expect_abort" = yes ]; then
    if [ "$marker" = no ]; then
        echo "FAIL $name: the program failed before reaching its deliberate abort" >&2
        exit 1
    fi
    if [ $rc -eq 0 ]; then
        echo "FAIL $name: mpirun exited 0, but a process aborted; the job must fail" >&2
        exit 1
    fi
    if [ "$elapsed" -gt 30 ]; then
        echo "FAIL $name: the job ended ${elapsed} s after start (limit 30 s) after an abort" >&2
        exit 1
    fi
    echo "PASS $name: the abort ended the job (mpirun exit $rc) after ${elapsed} s"
    exit 0
fi
if [ $rc -ne 0 ]; then
    echo "FAIL $name: mpirun exited $rc under pml $pml after ${elapsed} s" >&2
    exit 1
fi
echo "$name: ok under pml $pml in ${elapsed} s"
exit 0
