#!/bin/sh
# Verify the Promela models of the lock library, of sync's owned mode, of the PML's reused
# pthread waiter, of freeing destroyed communicators, of the copy slots of two-copy
# rendezvous, of context-id agreement for endpoints communicators, of the matching table's
# growth, of the shared-memory doorbell, of any-tag receives in their sender's list, of
# ULTs parked in an MCS queue and of the try-lock whose word names its holder, with spin
# (run by `make check` when configure found spin).
# For each configuration: a safety run (assertions, invalid end states) and, for the
# locks, a liveness run (acceptance cycles of the model's ltl claim). Deliberately broken
# variants must fail (a no_waiters() that lies; an owned sync without the quiescence
# handshake, or whose local signals wake a foreign waiter only on completion; a wait for
# any request that does not settle its late wakes; a communicator freed without waiting
# for the drains; a copy slot reused before the receiver cleared it, or FRAGs pushed into
# any queue; context ids agreed without the local gate, without retry, or by every
# endpoint separately; table accesses that lock a bucket of a replaced array, or a grower
# that unlocks them instead of marking them moved; senders that ring with a compiler
# barrier only while the sleeper makes no heavy barrier; unordered arrivals that never
# take the peer lock, or wildcards allowed again without recounting a sender's unexpected
# messages; a parking waiter or a hand-off that stores instead of a read-modify-write; a
# try-lock whose failed attempt exchanges its name in), so each property is known to have
# teeth.
# Generated files go to a temporary directory (VPATH builds, read-only source trees).
#
# Environment: srcdir (set by the automake test harness; defaults to this script's
# directory's grandparent), SPIN (default: spin), CC (default: cc).
set -u

: "${srcdir:=$(dirname "$0")/../..}"
# Absolute: the checks below run from a temporary directory.
srcdir=$(cd "$srcdir" && pwd) || exit 99
SPIN=${SPIN:-spin}
CC=${CC:-cc}
models="$srcdir/contrib/model"

work=$(mktemp -d "${TMPDIR:-/tmp}/mpiv-model.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT INT TERM
failures=0

# run_pan MODEL "DEFINES" MODE EXPECT: MODE is safety, liveness, or fair (liveness under
# weak fairness); EXPECT is pass or fail.
run_pan() {
    model=$1 defines=$2 mode=$3 expect=$4
    label="$(basename "$model") [$defines] $mode"
    rm -f "$work"/pan* "$work"/*.trail
    # shellcheck disable=SC2086 # defines is a list of -D flags
    if ! (cd "$work" && "$SPIN" -a $defines "$model") > "$work/spin.log" 2>&1; then
        cat "$work/spin.log"
        echo "FAIL: $label: spin -a"
        failures=$((failures + 1))
        return
    fi
    if [ "$mode" = safety ]; then
        cflags="-DNOCLAIM" panflags=""
    elif [ "$mode" = fair ]; then
        cflags="-DNFAIR=3" panflags="-a -f"
    else
        cflags="" panflags="-a"
    fi
    if ! (cd "$work" && "$CC" -O1 -DCOLLAPSE $cflags -o pan pan.c) > "$work/cc.log" 2>&1; then
        cat "$work/cc.log"
        echo "FAIL: $label: compiling pan"
        failures=$((failures + 1))
        return
    fi
    # shellcheck disable=SC2086
    (cd "$work" && ./pan $panflags -m200000) > "$work/pan.log" 2>&1
    if grep -q "max search depth too small" "$work/pan.log"; then
        cat "$work/pan.log"
        echo "FAIL: $label: incomplete search (depth limit)"
        failures=$((failures + 1))
        return
    fi
    if grep -q "errors: 0" "$work/pan.log"; then
        result=pass
    else
        result=fail
    fi
    if [ "$result" = "$expect" ]; then
        echo "ok: $label ($(sed -n 's/^ *\([0-9][0-9]*\) states, stored.*/\1 states/p' "$work/pan.log"))"
    else
        cat "$work/pan.log"
        echo "FAIL: $label: expected $expect, got $result"
        failures=$((failures + 1))
    fi
}

for defines in "-DN=3 -DITERS=2"; do
    run_pan "$models/ticket.pml" "$defines" safety pass
    run_pan "$models/ticket.pml" "$defines" liveness pass
done
for defines in "-DNH=2 -DNL=1 -DITERS=2" "-DNH=2 -DNL=2 -DITERS=1"; do
    run_pan "$models/tlp.pml" "$defines" safety pass
    run_pan "$models/tlp.pml" "$defines" liveness pass
done
run_pan "$models/tlp.pml" "-DNH=2 -DNL=1 -DITERS=2 -DBROKEN_NO_WAITERS" liveness fail
for defines in "-DK=2" "-DK=3 -DREMOTE" "-DK=2 -DPTHREAD" "-DK=3 -DPTHREAD -DREMOTE"; do
    run_pan "$models/owned_sync.pml" "$defines" safety pass
done
run_pan "$models/owned_sync.pml" "-DK=2 -DNO_QUIESCE" safety fail
run_pan "$models/owned_sync.pml" "-DK=2 -DNO_QUIESCE -DPTHREAD" safety fail
run_pan "$models/owned_sync.pml" "-DK=2 -DREMOTE -DWAKE_ON_COMPLETION_ONLY" safety fail
run_pan "$models/wait_any.pml" "" safety pass
run_pan "$models/wait_any.pml" "-DNO_SETTLE" safety fail
for defines in "-DDRAINERS=2 -DROUNDS=2" "-DDRAINERS=3 -DROUNDS=2"; do
    run_pan "$models/comm_reap.pml" "$defines" safety pass
done
run_pan "$models/comm_reap.pml" "-DNO_MARK" safety fail
for defines in "" "-DSLOTS=1 -DPIECES=3" "-DSLOTS=3 -DPIECES=7"; do
    run_pan "$models/copy_slots.pml" "$defines" safety pass
done
run_pan "$models/copy_slots.pml" "-DNO_BUSY" safety fail
run_pan "$models/copy_slots.pml" "-DANY_QUEUE" safety fail
for defines in "" "-DE=3"; do
    run_pan "$models/ep_cid.pml" "$defines" safety pass
done
run_pan "$models/ep_cid.pml" "" fair pass
run_pan "$models/ep_cid.pml" "-DNO_LOCAL_LOCK" safety fail
run_pan "$models/ep_cid.pml" "-DNO_RETRY" safety fail
run_pan "$models/ep_cid.pml" "-DEACH_ENDPOINT" fair fail
for defines in "-DGROWS=1" "-DGROWS=2" "-DGROWS=1 -DSAMPLER"; do
    run_pan "$models/table_grow.pml" "$defines" safety pass
done
run_pan "$models/table_grow.pml" "-DGROWS=1 -DNO_RECHECK" safety fail
run_pan "$models/table_grow.pml" "-DGROWS=1 -DNO_MARK" safety fail
run_pan "$models/table_grow.pml" "-DGROWS=1 -DSAMPLER -DSAMPLE_MOVED" safety fail

for defines in "" "-DFENCE" "-DNS=3 -DM=2"; do
    run_pan "$models/doorbell.pml" "$defines" safety pass
done
run_pan "$models/doorbell.pml" "-DNO_HEAVY" safety fail
for defines in "" "-DSTART_NO_WILD" "-DN=3 -DSTART_NO_WILD"; do
    run_pan "$models/any_tag.pml" "$defines" safety pass
done
run_pan "$models/any_tag.pml" "-DNO_PEER_LOCK" safety fail
run_pan "$models/any_tag.pml" "-DNO_RECOUNT -DSTART_NO_WILD" safety fail
for defines in "" "-DPTHREAD" "-DN=4 -DITERS=1"; do
    run_pan "$models/mcs_park.pml" "$defines" safety pass
done
run_pan "$models/mcs_park.pml" "-DPARK_STORE" safety fail
run_pan "$models/mcs_park.pml" "-DPASS_STORE" safety fail
for defines in "" "-DN=4 -DROUNDS=3"; do
    run_pan "$models/lock_holder.pml" "$defines" safety pass
done
run_pan "$models/lock_holder.pml" "-DEXCHANGE" safety fail

[ "$failures" -eq 0 ] || exit 1
exit 0
