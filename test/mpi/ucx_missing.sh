#!/bin/sh
# ucx_missing: UCX's library missing at run time. In a private mount namespace an empty
# file is mounted over libucp.so.0, so that opening it fails as on a node without UCX:
#   - a job that needs the UCX transport (pml_mpiv_transports ucx stands in for a job on
#     several nodes) with --mca pml mpiv,ob1 runs on ob1, and mpiv says in one line why
#     it declined, naming the library;
#   - with --mca pml mpiv alone the job fails at once with Open MPI's "cannot be selected";
#   - a one-node job with the default transports runs on mpiv over shared memory (UCX is
#     not loaded where it carries no traffic).
# Runs the `self` test program through run.sh; environment as for run.sh. Exit 77 (skip)
# without root, unshare or mount, where mount namespaces are forbidden, when this mpiv was
# built without UCX, or when there is no libucp.so.0 to hide.
set -u
here=$(cd "$(dirname "$0")" && pwd)
skip() {
    echo "SKIP ucx_missing: $1"
    exit 77
}
if [ -z "${MPIV_UCX_MISSING_INSIDE:-}" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v mount >/dev/null; then
        skip "needs root, unshare and mount (a private mount namespace)"
    fi
    unshare --mount --propagation private true 2>/dev/null ||
        skip "this machine forbids mount namespaces (unshare --mount failed)"
    MPIV_UCX_MISSING_INSIDE=1 exec unshare --mount --propagation private sh "$0" "$@"
fi
# Every libucp.so.0 libmpiv could open: the loader's (ldconfig's cache, LD_LIBRARY_PATH)
# and the one in the directory configure found UCX in.
build=${MPIV_TEST_TOP_BUILDDIR:-$(pwd)}
libdir=$(sed -n 's/^#define MPIV_UCX_LIBDIR "\(.*\)"$/\1/p' "$build/config.h" 2>/dev/null)
candidates=$( {
    ldconfig -p 2>/dev/null | awk '$1 == "libucp.so.0" && $NF ~ /^\// { print $NF }'
    printf '%s\n' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | sed -n 's|^/.*|&/libucp.so.0|p'
    [ -n "$libdir" ] && echo "$libdir/libucp.so.0"
} | while read -r f; do [ -e "$f" ] && readlink -f "$f"; done | sort -u)
[ -n "$candidates" ] || skip "no libucp.so.0 found to hide (ldconfig -p, LD_LIBRARY_PATH, config.h)"
log=${TMPDIR:-/tmp}/mpiv-ucx-missing.$$
empty=${TMPDIR:-/tmp}/mpiv-ucx-missing-lib.$$
trap 'rm -f "$log" "$empty"' EXIT
: >"$empty"
for f in $candidates; do
    mount --bind "$empty" "$f" || skip "cannot mount over $f"
done
name=ucx_missing
. "$here/self_run.sh"

run_self mpiv,ob1 "--mca pml_mpiv_transports ucx --mca pml_base_verbose 10" ||
    fail "--mca pml mpiv,ob1 without libucp did not run on ob1 (exit $?)"
grep -q "built without UCX" "$log" && skip "this mpiv was built without UCX"
expect "pml mpiv: the job needs the UCX transport, and cannot load UCX: .*libucp" \
    "mpiv did not say in one line that it declined for want of libucp"
expect "selected ob1" "ob1 was not selected"
echo "PASS ucx_missing: without libucp a job that needs UCX ran on ob1, and mpiv said why"

run_self mpiv "--mca pml_mpiv_transports ucx" 60 &&
    fail "--mca pml mpiv alone must fail when the job needs UCX and libucp is missing"
expect "cannot be selected" "no clear selection error"
echo "PASS ucx_missing: pml mpiv alone failed with a clear error"

run_self mpiv "--mca pml_base_verbose 10" ||
    fail "a one-node job on mpiv did not run without libucp (exit $?)"
expect "selected mpiv" "mpiv was not selected for a one-node job"
grep -q "cannot load UCX" "$log" && fail "a one-node job tried to load UCX"
echo "PASS ucx_missing: a one-node job ran on mpiv without libucp"
