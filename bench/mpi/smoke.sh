#!/bin/bash
# Smoke test of the MPI benchmarks (make check): every benchmark runs once at tiny sizes with
# Open MPI's ob1 and, when given, with MPICH; ult_pingpong, which needs mpiv, runs under
# pml mpiv (progress inline and server). A run passes when it exits 0 within its timeout
# and prints exactly the expected data points, each a well-formed result line. It also checks
# that a data mismatch between the two processes and a bad option end in non-zero exits.
#
# usage: smoke.sh BINDIR OMPI_MPIRUN [MPICH_MPIEXEC]
#   BINDIR holds mt_pingpong, msgrate, latbw, overlap, oversub, ult_pingpong, line_rtt and,
#   for MPICH, the .mpich builds of the first five.
# Environment: MPIV_BUILDDIR, the top build directory whose ompi-component/.libs holds
#   mca_pml_mpiv.so (else an installed mpiv is used, else ult_pingpong is not run), and
#   OMPI_PKGLIBDIR, Open MPI's component directory (default: ask ompi_info).
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 BINDIR OMPI_MPIRUN [MPICH_MPIEXEC]" >&2
    exit 2
fi
bindir=$1
ompi_mpirun=$2
mpich_mpiexec=${3:-}
run_timeout=60
failures=0
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# What follows the metric in a result line.
rest='value=[0-9]+\.[0-9]{3} unit=[^ ]+ iters=[1-9][0-9]* secs=[0-9]+\.[0-9]{3} '
rest+='bound=(time|iters)( [a-z_]+=[^ ]+)*$'

# expect_points FILE BENCH IMPL "THREADS..." "SIZES..." "METRICS..."
# Checks that FILE holds exactly one line per (threads, size, metric) combination, and that
# each has a non-negative value, a unit, a positive iteration count and a bound.
expect_points() {
    local file=$1 bench=$2 impl=$3 threads=$4 sizes=$5 metrics=$6
    local want=0 t s m n
    for t in $threads; do
        for s in $sizes; do
            for m in $metrics; do
                want=$((want + 1))
                n=$(grep -cE "^bench=$bench impl=$impl threads=$t size=$s metric=$m $rest" "$file")
                [ "$n" = 1 ] ||
                    fail "$bench/$impl: $n lines for threads=$t size=$s metric=$m (want 1)"
            done
        done
    done
    n=$(grep -c "^bench=$bench " "$file")
    [ "$n" = "$want" ] || fail "$bench/$impl: $n result lines, expected $want"
}

# expect_overlap FILE IMPL "SIZES..." "WORK_US..."
# overlap prints each metric once per mode, size and work time, with its own trailing fields.
expect_overlap() {
    local file=$1 impl=$2 sizes=$3 works=$4
    local want=0 mode s w m n pat
    for mode in isend irecv; do
        for s in $sizes; do
            for w in $works; do
                for m in t_comm t_work t_total t_work_in_total t_post_in_total overlap total_over_max; do
                    want=$((want + 1))
                    pat="^bench=overlap impl=$impl threads=1 size=$s metric=$m "
                    pat+="value=-?[0-9]+\.[0-9]{3} unit=(us|ratio) mode=$mode work_us=$w "
                    pat+="peer_wait=spin\$"
                    n=$(grep -cE "$pat" "$file")
                    [ "$n" = 1 ] ||
                        fail "overlap/$impl: $n lines for $mode size=$s work_us=$w $m (want 1)"
                done
            done
        done
    done
    n=$(grep -c "^bench=overlap " "$file")
    [ "$n" = "$want" ] || fail "overlap/$impl: $n result lines, expected $want"
}

# run NAME LAUNCHER... -- runs one job under the timeout, output in $tmp/NAME.out
run() {
    local name=$1
    shift
    timeout -k 5 "$run_timeout" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then
        fail "$name exited with $rc: $*"
        sed 's/^/    /' "$tmp/$name.err" | tail -n 20
        return 1
    fi
}

smoke_impl() {
    local impl=$1 suffix=$2
    shift 2
    local launch=("$@")
    local args=(--seconds 0.05 --warmup 5 --label "$impl")
    # 64k messages take the rendezvous path of every library here.
    run "mt_pingpong-$impl" "${launch[@]}" "$bindir/mt_pingpong$suffix" -t 1,2 -s 0,8,64k \
        "${args[@]}" &&
        expect_points "$tmp/mt_pingpong-$impl.out" mt_pingpong "$impl" "1 2" "0 8 65536" \
            "rate lat_mean lat_p50 lat_p99"
    run "msgrate-$impl" "${launch[@]}" "$bindir/msgrate$suffix" -t 1,2 -s 8,64k "${args[@]}" &&
        expect_points "$tmp/msgrate-$impl.out" msgrate "$impl" "1 2" "8 65536" "msg_rate bw"
    run "msgrate_lat-$impl" "${launch[@]}" "$bindir/msgrate$suffix" --regime latency -t 1,3 \
        -s 0,8,64k "${args[@]}" &&
        expect_points "$tmp/msgrate_lat-$impl.out" msgrate_lat "$impl" "1 3" "0 8 65536" \
            "rate lat_mean lat_p50 lat_p99"
    run "latbw-$impl" "${launch[@]}" "$bindir/latbw$suffix" -s 0,1k,1M "${args[@]}" &&
        expect_points "$tmp/latbw-$impl.out" latbw "$impl" 1 "0 1024 1048576" \
            "rate lat_mean lat_p50 lat_p99 msg_rate bw"
    run "oversub_fan-$impl" "${launch[@]}" "$bindir/oversub$suffix" --pattern fan -n 50 \
        --label "$impl" &&
        expect_points "$tmp/oversub_fan-$impl.out" oversub_fan "$impl" 1 12 "rate round_us"
    run "oversub_pairs-$impl" "${launch[@]}" "$bindir/oversub$suffix" --pattern pairs -n 50 \
        -s 8 --label "$impl" &&
        expect_points "$tmp/oversub_pairs-$impl.out" oversub_pairs "$impl" 1 8 \
            "lat_mean msg_rate"
    run "overlap-$impl" "${launch[@]}" "$bindir/overlap$suffix" --sizes 0,64k --work-us 0,20 \
        --reps 2 --warmup 1 --impl "$impl" &&
        expect_overlap "$tmp/overlap-$impl.out" "$impl" "0 65536" "0 20"
}

ob1=("$ompi_mpirun" -np 2 --oversubscribe --mca pml ob1)
smoke_impl ob1 "" "${ob1[@]}"

# The two processes disagree on the message size: the data check must abort the job.
timeout -k 5 "$run_timeout" "$ompi_mpirun" --oversubscribe --mca pml ob1 \
    -np 1 "$bindir/mt_pingpong" -s 8 -d 0.05 : -np 1 "$bindir/mt_pingpong" -s 16 -d 0.05 \
    >"$tmp/mismatch.out" 2>"$tmp/mismatch.err"
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    fail "a size mismatch between the processes gave exit status $rc, expected an abort"
elif ! grep -q "received 8 bytes, expected 16" "$tmp/mismatch.err"; then
    fail "a size mismatch aborted without the data-check message"
    tail -n 20 "$tmp/mismatch.err"
fi

"$bindir/mt_pingpong" --sizes 8,x >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a bad --sizes list gave exit status $rc, expected 2"

# line_rtt (no MPI): a positive round trip between two PUs; one PU named twice is refused.
if [ "$(nproc)" -ge 2 ]; then
    pus=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])'))
    out=$("$bindir/line_rtt" -a "${pus[0]}" -b "${pus[1]}" -n 1000 -k 3 2>&1)
    [[ $out =~ ^line_rtt_ns=([0-9]+\.[0-9])\ min=[0-9.]+\ max=[0-9.]+\ pus=[0-9]+,[0-9]+$ ]] &&
        [ "${BASH_REMATCH[1]%.*}${BASH_REMATCH[1]#*.}" -gt 0 ] ||
        fail "line_rtt printed '$out'"
fi
"$bindir/line_rtt" -a 0 -b 0 >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "line_rtt with one PU twice gave exit status $rc, expected 2"

# mem_lat (no MPI): both measurements print a positive time; lines that overflow their
# region are refused.
out=$("$bindir/mem_lat" -m 8 -n 100000 -k 3 2>&1)
[[ $out =~ ^mem_lat_ns=[0-9]+\.[0-9]\ min=[0-9.]+\ max=[0-9.]+\ mib=8$ ]] &&
    [[ $out != mem_lat_ns=0.0* ]] || fail "mem_lat printed '$out'"
out=$("$bindir/mem_lat" -u 256 -l 4 -s 4096 -k 3 2>&1)
[[ $out =~ ^visit_ns=[0-9]+\.[0-9]\ min=[0-9.]+\ max=[0-9.]+\ ults=256\ lines=4\ stack=4096$ ]] &&
    [[ $out != visit_ns=0.0* ]] || fail "mem_lat -u printed '$out'"
"$bindir/mem_lat" -u 4 -l 65 -s 4096 >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "mem_lat with 65 lines in a 4096-byte region gave exit status $rc, expected 2"

# ult_pingpong: mpiv ULTs, so pml mpiv only; from the build tree when it holds the component.
mpiv=()
builddir=${MPIV_BUILDDIR:-}
if [ -n "$builddir" ] && [ -f "$builddir/ompi-component/.libs/mca_pml_mpiv.so" ]; then
    pkglibdir=${OMPI_PKGLIBDIR:-}
    if [ -z "$pkglibdir" ]; then
        pkglibdir=$("$(dirname "$ompi_mpirun")/ompi_info" --parsable --path pkglibdir 2>/dev/null |
            sed -n 's/^path:pkglibdir://p')
    fi
    mpiv=("$ompi_mpirun" -np 2 --oversubscribe
        --mca mca_base_component_path "$builddir/ompi-component/.libs${pkglibdir:+:$pkglibdir}"
        -x "LD_LIBRARY_PATH=$builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" --mca pml mpiv)
elif "$(dirname "$ompi_mpirun")/ompi_info" --parsable 2>/dev/null | grep -q "^mca:pml:mpiv:"; then
    mpiv=("$ompi_mpirun" -np 2 --oversubscribe --mca pml mpiv)
fi
if [ ${#mpiv[@]} -eq 0 ]; then
    echo "note: pml mpiv is neither in MPIV_BUILDDIR nor installed, ult_pingpong was not run"
elif [ ! -x "$bindir/ult_pingpong" ]; then
    fail "pml mpiv is available but $bindir/ult_pingpong is missing"
else
    # --help first: it also lets libtool's wrapper finish the uninstalled program before
    # two processes start it at once.
    "$bindir/ult_pingpong" --help >/dev/null 2>&1 || fail "ult_pingpong --help failed"
    "$bindir/ult_pingpong" --threads 2000000 >/dev/null 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "ult_pingpong --threads 2000000 gave exit status $rc, expected 2"
    "$bindir/ult_pingpong" --scratch-ults 4294967296 >/dev/null 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "ult_pingpong --scratch-ults 4294967296 gave exit status $rc, expected 2"
    "$bindir/ult_pingpong" --prefetch-ults -1 >/dev/null 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "ult_pingpong --prefetch-ults -1 gave exit status $rc, expected 2"
    # inline with the scratch stack and the stack prefetch always (0) and never, server as
    # it comes
    for variant in inline:0 inline:4294967295 server:default; do
        progress=${variant%%:*}
        scratch=${variant#*:}
        run "ult_pingpong-$progress-$scratch" "${mpiv[@]}" --mca pml_mpiv_progress "$progress" \
            "$bindir/ult_pingpong" -t 1,100 -s 0,8,64k --seconds 0.05 --warmup 5 \
            --scratch-ults "$scratch" --prefetch-ults "$scratch" --label "mpiv-$progress" &&
            expect_points "$tmp/ult_pingpong-$progress-$scratch.out" ult_pingpong \
                "mpiv-$progress" "1 100" "0 8 65536" \
                "rate msg_rate lat_mean lat_p50 lat_p99 t_total rss_rank0 rss_rank1"
    done
fi

if [ -n "$mpich_mpiexec" ]; then
    if [ -x "$bindir/mt_pingpong.mpich" ]; then
        smoke_impl mpich .mpich "$mpich_mpiexec" -n 2
    else
        fail "MPICH launcher given but $bindir/mt_pingpong.mpich is missing"
    fi
else
    echo "note: MPICH not configured, only Open MPI ob1 was tested"
fi

if [ $failures -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all benchmark smoke runs passed"
