#!/bin/sh
# Runs test-apsm (test_apsm.c) under mpirun/mpiexec with two processes, without and with
# libmpiv-apsm preloaded, in the configurations below. Every run has a 120 s timeout, so a hang
# fails the test instead of stalling it.
#
# usage: run_apsm_test.sh ompi|mpich LAUNCHER TEST_PROGRAM LIBRARY
set -u
if [ $# -ne 4 ]; then
    echo "usage: $0 ompi|mpich LAUNCHER TEST_PROGRAM LIBRARY" >&2
    exit 2
fi
impl=$1
launcher=$2
program=$3
library=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpiv-apsm.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
pml="--mca pml ob1"

# launch ARGS...: the launcher with two processes (and, for Open MPI, the PML in $pml).
launch() {
    case $impl in
    ompi) timeout 120 "$launcher" --oversubscribe -np 2 $pml "$@" ;;
    mpich) timeout 120 "$launcher" -n 2 "$@" ;;
    esac
}

# check NAME EXPECT INIT [VAR=VALUE...]: run the test with these environment settings (given
# through env(1) so that LD_PRELOAD reaches the test processes only). Output goes to
# $tmp/NAME.out and is shown.
check() {
    name=$1
    expect=$2
    init=$3
    shift 3
    echo "== $impl $name: $*"
    launch env "$@" "$program" --expect "$expect" --init "$init" --file "$tmp/$name.dat" \
        >"$tmp/$name.out" 2>&1
    rc=$?
    cat "$tmp/$name.out"
    if [ $rc -eq 0 ]; then
        echo "PASS: $impl $name"
    elif [ $rc -eq 124 ]; then
        echo "FAIL: $impl $name (timed out after 120 s)"
        failed=1
    else
        echo "FAIL: $impl $name (exit status $rc)"
        failed=1
    fi
}

# expect_line NAME PATTERN: the output of run NAME must contain PATTERN.
expect_line() {
    if grep -q "$2" "$tmp/$1.out"; then
        echo "PASS: $impl $1 says '$2'"
    else
        echo "FAIL: $impl $1 does not say '$2'"
        failed=1
    fi
}

# The first and last PU this shell may use, for the pinning run.
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
first_pu=${allowed%%[-,]*}
last_pu=${allowed##*[-,]}

check plain plain multiple
check apsm apsm multiple LD_PRELOAD="$library"
check apsm-eager0-pinned apsm multiple LD_PRELOAD="$library" MPIV_APSM_EAGER_LIMIT=0 \
    MPIV_APSM_CPU_LIST="${last_pu}_${first_pu}" MPIV_APSM_VERBOSE=1
expect_line apsm-eager0-pinned "rank 0: progress thread bound to PU $last_pu\$"
expect_line apsm-eager0-pinned "rank 1: progress thread bound to PU $first_pu\$"
check apsm-init-spin apsm single LD_PRELOAD="$library" MPIV_APSM_POLL=spin
check disabled disabled multiple LD_PRELOAD="$library" MPIV_APSM_DISABLE=1
# Both ways of waiting, whatever the binding gives: test-then-yield and the library's own.
check apsm-yield-waits apsm multiple LD_PRELOAD="$library" MPIV_APSM_WAIT=yield \
    MPIV_APSM_VERBOSE=1
expect_line apsm-yield-waits "progress thread started: poll=yield, waits=yield"
check apsm-library-waits apsm multiple LD_PRELOAD="$library" MPIV_APSM_WAIT=library \
    MPIV_APSM_POLL=sleep:5 MPIV_APSM_VERBOSE=1
expect_line apsm-library-waits "progress thread started: poll=sleep, waits=library"
check apsm-bad-wait apsm multiple LD_PRELOAD="$library" MPIV_APSM_WAIT=sometimes
expect_line apsm-bad-wait "MPIV_APSM_WAIT='sometimes' is not auto, yield or library: using auto"
if [ "$impl" = ompi ]; then
    pml="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any"
    check ucx-apsm apsm multiple LD_PRELOAD="$library"
fi
exit $failed
