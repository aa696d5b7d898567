#!/bin/bash
# Smoke test of the driver bench/compare (make check): a tiny comparison of ob1 (and MPICH
# when given) must write the CSV files and print the Markdown table with one row per thread
# count, alternate the implementations (in an order that rotates), give overlap one section per variant, report a run
# that overruns its timeout as stopped without leaving processes behind, record the
# cache-line round trip between two PUs before each run (line_rtt), skip an
# implementation that is not installed, and skip the endpoints benchmarks (ep_*) on ob1.
# With MPIV_BUILDDIR (the top build directory) holding mca_pml_mpiv.so it also runs the mpiv
# rows (mpiv-inline, mpiv-server) from the build tree, ult_pingpong, the machinery of
# --million at a tiny size, and the ep_* benchmarks (threads and ULTs: the legs on each
# communicator and their ratio). With libmpiv-apsm built there (contrib/apsm), the overlap
# run also covers the +apsm variants (library preloaded). It runs the network references
# (ucx-tcp, ob1-tcp) on one node and, as root, once across the two nodes of contrib/twonode.
#
# usage: compare_smoke.sh COMPARE BINDIR OMPI_MPIRUN [MPICH_MPIEXEC]
set -u

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 COMPARE BINDIR OMPI_MPIRUN [MPICH_MPIEXEC]" >&2
    exit 2
fi
compare=$1
bindir=$2
export OMPI_MPIRUN=$3
export MPICH_MPIEXEC=${4:-}
impls=ob1
[ -n "$MPICH_MPIEXEC" ] && impls=ob1,mpich
failures=0
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# 1. A tiny comparison over the benchmarks with a time bound.
timeout -k 5 300 "$compare" --impl "$impls" --bench mt_pingpong,msgrate,msgrate_lat,latbw \
    --threads 1,2 --reps 2 --seconds 0.05 --sizes 0,4k --bindir "$bindir" --out "$tmp/a" \
    >"$tmp/a.md" 2>"$tmp/a.err"
rc=$?
[ $rc -eq 0 ] || { fail "compare exited with $rc"; tail -n 20 "$tmp/a.err"; }
for f in raw.csv summary.csv runs.csv runs.log table.md; do
    [ -s "$tmp/a/$f" ] || fail "compare did not write $f"
done
cmp -s "$tmp/a.md" "$tmp/a/table.md" || fail "the printed table differs from table.md"
# The machine's state before each run: line_rtt's cache-line round trip between two PUs
# (empty for a run whose probe did not finish within its 5 s; at least one must have).
if [ "$(nproc)" -ge 2 ]; then
    awk -F, 'NR == 1 { if ($9 != "line_rtt_ns") bad = 1; next }
             $9 == "" { next }
             $9 !~ /^[0-9]+\.[0-9]$/ || $9 + 0 <= 0 { bad = 1; next }
             { ++good }
             END { exit bad || !good }' "$tmp/a/runs.csv" ||
        fail "runs.csv lacks line_rtt_ns figures"
    probe_re="^Cache-line round trip between the ranks' PUs before each run "
    probe_re+="\(\`line_rtt\`\): median [0-9]+ ns \([0-9]+–[0-9]+\)\."
    grep -qE "$probe_re" "$tmp/a.md" || fail "the table does not give the line round trip"
fi

IFS=, read -r -a impl_list <<<"$impls"
for impl in "${impl_list[@]}"; do
    for point in "mt_pingpong,rate,1,8" "mt_pingpong,rate,2,8" "msgrate,msg_rate,2,8" \
        "msgrate_lat,rate,2,8" "latbw,bw,1,4096"; do
        IFS=, read -r bench metric threads size <<<"$point"
        # bench,metric,variant,unit,threads,size,impl,runs,median,...
        grep -qE "^$bench,$metric,,[^,]+,$threads,$size,$impl,2,[0-9.e+]+," \
            "$tmp/a/summary.csv" ||
            fail "summary.csv lacks 2 runs of $bench $metric threads=$threads size=$size $impl"
    done
done
grep -q "^### mt_pingpong: rate (roundtrips/s, higher is better), size 8 B\$" "$tmp/a.md" ||
    fail "the table has no mt_pingpong rate section"
rows=$(grep -cE "^\| [12] \| [0-9.]+[kMG]? \([0-9.]+[kMG]?–[0-9.]+[kMG]?\) \|" "$tmp/a.md")
[ "$rows" -ge 6 ] || fail "expected at least 6 table rows with median (min–max), got $rows"
if [ "$impls" = ob1,mpich ]; then
    grep -q "| mpich/ob1 |" "$tmp/a.md" || fail "the table has no mpich/ob1 ratio column"
fi
# Runs of one data point alternate implementations: each repetition runs each one once, and
# with several the repetitions start with different ones (the order rotates).
awk -F, 'NR > 1 { key = $4 "," $5; rep = key "," $2
                  if (seen[rep "," $3]++) bad = 1
                  if (!(key "," $3 in impl)) { impl[key "," $3] = 1; impls[key]++ }
                  if (!(rep in first)) { first[rep] = $3; reps[key]++; nth[key "," reps[key]] = $2 } }
         END { for (key in reps)
                   for (i = 2; i <= reps[key]; ++i)
                       if (impls[key] > 1 &&
                           first[key "," nth[key "," i]] == first[key "," nth[key "," i - 1]])
                           bad = 1
               exit bad }' "$tmp/a/runs.csv" ||
    fail "runs.csv: an implementation ran twice in one repetition, or two repetitions of one data point started with the same implementation"

# 2. overlap, whose points differ by mode and work time: one table section per variant, and
# the +apsm variants (ob1, and MPICH when given) when libmpiv-apsm is in the build tree.
builddir=${MPIV_BUILDDIR:-}
o_impls=ob1
apsm_lib=$builddir/contrib/apsm/.libs/libmpiv-apsm.so
apsm_mpich_lib=$builddir/contrib/apsm/libmpiv-apsm-mpich.so
if [ -n "$builddir" ] && [ -f "$apsm_lib" ]; then
    o_impls=ob1,ob1+apsm
    [ -n "$MPICH_MPIEXEC" ] && [ -f "$apsm_mpich_lib" ] && o_impls=$o_impls,mpich,mpich+apsm
else
    echo "note: no libmpiv-apsm.so in MPIV_BUILDDIR, the +apsm variants are not tested"
fi
timeout -k 5 120 "$compare" --quick --impl "$o_impls" --bench overlap --reps 1 \
    --bindir "$bindir" --out "$tmp/o" >"$tmp/o.md" 2>"$tmp/o.err"
rc=$?
[ $rc -eq 0 ] || { fail "compare --bench overlap exited with $rc"; tail -n 20 "$tmp/o.err"; }
IFS=, read -r -a o_list <<<"$o_impls"
for mode in isend irecv; do
    grep -q "^### overlap: overlap (ratio, higher is better), 1 thread, mode=$mode " \
        "$tmp/o.md" || fail "the table has no overlap section for mode=$mode"
    grep -q "^### overlap: t_comm, t_work, t_total side by side, mode=$mode " "$tmp/o.md" ||
        fail "the table has no t_total against t_work section for mode=$mode"
    for impl in "${o_list[@]}"; do
        row="^overlap,overlap,mode=$mode work_us=auto peer_wait=spin,ratio,1,4194304"
        grep -qE "$row,${impl/+/\\+},1," "$tmp/o/summary.csv" ||
            fail "summary.csv lacks the overlap of mode=$mode at 4 MiB, $impl"
    done
done
for impl in "${o_list[@]}"; do
    # size, implementation, then 6 numbers: t_comm t_work t_total total/max overlap t_work in
    n=$(grep -cE "^\| [14] MiB \| ${impl/+/\\+}( \| -?[0-9.]+[kMG]?){6} \|\$" "$tmp/o.md")
    [ "$n" -eq 4 ] || fail "the t_total against t_work tables have $n complete rows of $impl, not 4"
done
if [[ $o_impls == *+apsm* ]]; then
    grep -q "| ob1+apsm/ob1 |" "$tmp/o.md" || fail "the overlap table has no ob1+apsm/ob1 ratio"
    grep -q ",ob1+apsm,overlap,.* -x LD_PRELOAD=$apsm_lib .*/overlap " "$tmp/o/runs.csv" ||
        fail "ob1+apsm did not run overlap with LD_PRELOAD=$apsm_lib"
    if [[ $o_impls == *mpich+apsm* ]]; then
        grep -q ",mpich+apsm,overlap,.* -genv LD_PRELOAD $apsm_mpich_lib .*/overlap.mpich " \
            "$tmp/o/runs.csv" || fail "mpich+apsm did not run overlap.mpich with the library"
    fi
    # The ping-pong benchmarks have no +apsm variant.
    timeout -k 5 60 "$compare" --impl ob1+apsm --bench mt_pingpong --bindir "$bindir" \
        --out "$tmp/p" >/dev/null 2>"$tmp/p.err"
    rc=$?
    [ $rc -eq 2 ] || fail "compare --impl ob1+apsm --bench mt_pingpong exited with $rc, expected 2"
    grep -q "skipped mt_pingpong: the APSM variants run only overlap" "$tmp/p.err" ||
        fail "mt_pingpong with ob1+apsm gave no skip note"
fi

# 3. A run that cannot finish within its timeout is stopped and reported as such.
timeout -k 5 120 "$compare" --impl ob1 --bench mt_pingpong --threads 1 --reps 1 \
    --seconds 40 --timeout 3 --bindir "$bindir" --out "$tmp/b" >"$tmp/b.md" 2>"$tmp/b.err"
rc=$?
[ $rc -eq 0 ] || { fail "compare with a timed-out run exited with $rc"; tail -n 20 "$tmp/b.err"; }
grep -q "^| 1 | < 0.667 roundtrips/s, stopped after 3 s |\$" "$tmp/b.md" ||
    fail "the rate of the timed-out run is not reported as below 2 round trips in 3 s"
grep -q "^| 1 | stopped after 3 s |\$" "$tmp/b.md" ||
    fail "the latency of the timed-out run is not reported as stopped"
grep -q ",timeout," "$tmp/b/runs.csv" || fail "runs.csv does not mark the run as timeout"
sleep 1
pgrep -f "mt_pingpong.*--seconds 40" >/dev/null && fail "processes of the timed-out run survived"

# 4. An implementation that is not installed is skipped with a note (--builddir none: the
# component of a build tree does not count).
if "$(dirname "$OMPI_MPIRUN")/ompi_info" --parsable 2>/dev/null | grep -q "^mca:pml:mpiv:"; then
    echo "note: mpiv is installed, the skip of a missing implementation is not tested"
else
    timeout -k 5 60 "$compare" --impl mpiv-inline --builddir none --bindir "$bindir" \
        --out "$tmp/c" >/dev/null 2>"$tmp/c.err"
    rc=$?
    [ $rc -eq 2 ] || fail "compare --impl mpiv-inline without mpiv exited with $rc, expected 2"
    grep -q "skipped mpiv-inline: ompi_info does not list 'MCA pml: mpiv'" "$tmp/c.err" ||
        fail "compare --impl mpiv-inline without mpiv gave no skip note"
fi

# The endpoints benchmarks need MPIX_Comm_create_endpoints: on ob1 alone nothing runs.
timeout -k 5 60 "$compare" --impl ob1 --bench ep_pingpong,ep_msgrate_ult --bindir "$bindir" \
    --out "$tmp/n" >/dev/null 2>"$tmp/n.err"
rc=$?
[ $rc -eq 2 ] || fail "compare --impl ob1 --bench ep_* exited with $rc, expected 2"
for b in ep_pingpong ep_msgrate_ult; do
    note="skipped $b: it runs on pml mpiv only, which is not available"
    grep -qF "$note (it needs MPIX_Comm_create_endpoints)" "$tmp/n.err" ||
        fail "$b with ob1 alone gave no skip note"
done

# 5. mpiv from the build tree: its rows next to ob1, ult_pingpong on mpiv only, --million
# (its by-implementation table) at a tiny size, and the endpoints benchmarks.
if [ -z "$builddir" ] || [ ! -f "$builddir/ompi-component/.libs/mca_pml_mpiv.so" ]; then
    echo "note: no mca_pml_mpiv.so in MPIV_BUILDDIR, the mpiv rows are not tested"
else
    timeout -k 5 300 "$compare" --impl ob1,mpiv-inline,mpiv-server \
        --bench mt_pingpong,ult_pingpong --threads 1,2 --ults 1,50 --reps 1 --seconds 0.05 \
        --builddir "$builddir" --bindir "$bindir" --out "$tmp/m" >"$tmp/m.md" 2>"$tmp/m.err"
    rc=$?
    [ $rc -eq 0 ] || { fail "compare with mpiv exited with $rc"; tail -n 20 "$tmp/m.err"; }
    grep -q "^- mpiv: the component of the build tree $builddir\$" "$tmp/m.md" ||
        fail "the table does not say that mpiv came from the build tree"
    grep -q "^| threads | ob1 | mpiv-inline | mpiv-server | mpiv-inline/ob1 | mpiv-server/ob1 |\$" \
        "$tmp/m.md" || fail "the mt_pingpong table lacks the mpiv columns and ratios"
    grep -q "^| ULTs | mpiv-inline | mpiv-server |\$" "$tmp/m.md" ||
        fail "the ult_pingpong table does not have exactly the mpiv columns"
    for impl in mpiv-inline mpiv-server; do
        for point in "mt_pingpong,rate,2" "ult_pingpong,rate,50" "ult_pingpong,rss_rank0,50"; do
            IFS=, read -r bench metric threads <<<"$point"
            grep -qE "^$bench,$metric,,[^,]+,$threads,8,$impl,1,[0-9.e+]+," "$tmp/m/summary.csv" ||
                fail "summary.csv lacks $bench $metric threads=$threads $impl"
        done
    done
    grep -q ",ult_pingpong,.*,ob1," "$tmp/m/summary.csv" && fail "ult_pingpong ran on ob1"

    timeout -k 5 300 "$compare" --million --impl mpiv-inline,mpiv-server --ults 200 \
        --million-iters 2 \
        --builddir "$builddir" --bindir "$bindir" --out "$tmp/u" >"$tmp/u.md" 2>"$tmp/u.err"
    rc=$?
    [ $rc -eq 0 ] || { fail "compare --million (tiny) exited with $rc"; tail -n 20 "$tmp/u.err"; }
    for impl in mpiv-inline mpiv-server; do
        # implementation, ULTs, then 7 numbers: completion ... peak RSS rank 1
        grep -qE "^\| $impl \| 200( \| [0-9.]+[kMG]?){7} \|\$" "$tmp/u.md" ||
            fail "the --million table has no complete row for $impl"
    done

    # Endpoints: one run per benchmark on mpiv-inline (ob1 skipped with a note), each with two
    # legs per communicator and the ratio.
    timeout -k 5 120 "$compare" --impl ob1,mpiv-inline \
        --bench ep_pingpong,ep_pingpong_ult,ep_msgrate,ep_msgrate_ult --threads 2 --ults 16 \
        --reps 1 --seconds 0.05 --builddir "$builddir" --bindir "$bindir" --out "$tmp/e" \
        >"$tmp/e.md" 2>"$tmp/e.err"
    rc=$?
    [ $rc -eq 0 ] || { fail "compare --bench ep_* exited with $rc"; tail -n 20 "$tmp/e.err"; }
    for point in ep_pingpong,2 ep_pingpong_ult,16 ep_msgrate,2 ep_msgrate_ult,16; do
        IFS=, read -r bench n <<<"$point"
        note="- $bench runs on pml mpiv only (it needs MPIX_Comm_create_endpoints): not on ob1"
        grep -qxF -e "$note" "$tmp/e.md" || fail "the table does not say $bench ran on mpiv only"
        grep -qE "^$bench,ep_over_world,,ratio,$n,8,mpiv-inline,1,[0-9.e+]+," \
            "$tmp/e/summary.csv" || fail "summary.csv lacks the ep_over_world of $bench at $n"
        for comm in world ep; do
            grep -qE "^$bench,rate,comm=$comm,[^,]+,$n,8,mpiv-inline,2,[0-9.e+]+," \
                "$tmp/e/summary.csv" || fail "summary.csv lacks the 2 $comm legs of $bench at $n"
        done
        grep -q "^### $bench: ep_over_world (ratio, higher is better), size 8 B\$" "$tmp/e.md" ||
            fail "the table has no ep_over_world section for $bench"
    done
    grep -q ",ob1,ep_" "$tmp/e/runs.csv" && fail "an endpoints benchmark ran on ob1"
fi

# 6. The network references (TCP only, on lo): their rows in summary.csv and the table, and
# TCP-only launch arguments; at 1 thread, so also that they provide MPI_THREAD_MULTIPLE
# (mt_pingpong aborts otherwise) without pml ucx's collapse at more threads than cores. Then,
# where contrib/twonode can set up its nodes (root), one tiny --twonode run: one rank on each
# node over their link, the other implementations skipped with a note.
net_impls=ob1-tcp
if "$(dirname "$OMPI_MPIRUN")/ompi_info" --parsable 2>/dev/null | grep -q "^mca:pml:ucx:"; then
    net_impls=ucx-tcp,ob1-tcp
else
    echo "note: Open MPI has no pml ucx, ucx-tcp is not tested"
fi
IFS=, read -r -a net_list <<<"$net_impls"
timeout -k 5 120 "$compare" --impl "$net_impls" --bench mt_pingpong,msgrate,latbw --threads 1 \
    --reps 1 --seconds 0.05 --sizes 0,4k --bindir "$bindir" --out "$tmp/t" >"$tmp/t.md" \
    2>"$tmp/t.err"
rc=$?
[ $rc -eq 0 ] || { fail "compare --impl $net_impls exited with $rc"; tail -n 20 "$tmp/t.err"; }
grep -q "^| threads | ${net_impls//,/ | } |\$" "$tmp/t.md" ||
    fail "the table has no columns $net_impls"
for impl in "${net_list[@]}"; do
    for point in "mt_pingpong,rate,1,8" "msgrate,msg_rate,1,8" "latbw,bw,1,4096"; do
        IFS=, read -r bench metric threads size <<<"$point"
        grep -qE "^$bench,$metric,,[^,]+,$threads,$size,$impl,1,[0-9.e+]+," "$tmp/t/summary.csv" ||
            fail "summary.csv lacks $bench $metric threads=$threads size=$size $impl"
    done
done
grep -q ",ob1-tcp,.* --mca btl self,tcp --mca btl_tcp_if_include lo .*/mt_pingpong " \
    "$tmp/t/runs.csv" || fail "ob1-tcp did not run with btl self,tcp on lo"
if [[ $net_impls == ucx-tcp,* ]]; then
    grep -q ",ucx-tcp,.* --mca pml ucx .*-x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo .*/mt_p" \
        "$tmp/t/runs.csv" || fail "ucx-tcp did not run with UCX_TLS=tcp,self on lo"
fi

twonode=$(dirname "$compare")/../contrib/twonode/twonode.sh
if ! why=$("$twonode" probe 2>&1); then
    echo "note: the --twonode run is not tested: ${why#twonode: }"
else
    # Another set-up (make check's contrib/twonode test) may hold the nodes for minutes.
    MPIV_TWONODE_LOCK_WAIT=120 timeout -k 5 240 "$compare" --twonode \
        --impl "$net_impls,ob1,mpiv-inline" --bench mt_pingpong --threads 1 --reps 1 \
        --seconds 0.05 --bindir "$bindir" --out "$tmp/w" >"$tmp/w.md" 2>"$tmp/w.err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "another two-node set-up held" "$tmp/w.err"; then
        echo "note: the --twonode run is not tested: $(grep -m1 "another two-node" "$tmp/w.err")"
    elif [ $rc -ne 0 ]; then
        fail "compare --twonode exited with $rc"
        tail -n 20 "$tmp/w.err"
    else
        grep -qE "^- --twonode: rank 0 on [^ ]+ \(mpirun there\), rank 1 on [^ ]+, over " \
            "$tmp/w.md" || fail "the --twonode table does not say where the ranks ran"
        for impl in ob1 mpiv-inline; do
            grep -q "^- skipped $impl: --twonode runs only " "$tmp/w.md" ||
                fail "--twonode did not skip $impl with a note"
        done
        for impl in "${net_list[@]}"; do
            grep -qE "^mt_pingpong,rate,,[^,]+,1,8,$impl,1,[0-9.e+]+," "$tmp/w/summary.csv" ||
                fail "summary.csv of --twonode lacks mt_pingpong rate $impl"
            grep -qE ",$impl,mt_pingpong,1,ok,0,[0-9.]+,[^ ]*/twonode.sh exec [^ ]+ .* --host " \
                "$tmp/w/runs.csv" || fail "--twonode did not run $impl through twonode.sh exec"
        done
        grep -q ",ob1-tcp,.* --mca btl_tcp_if_include lo " "$tmp/w/runs.csv" &&
            fail "--twonode ran ob1-tcp on lo, not on the nodes' link"
    fi
fi

if [ $failures -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "driver smoke test passed"
