#!/bin/bash
# check.sh: MPI programs started by `srun --mpi=pmix` (Open MPI's direct launch through
# Slurm's PMIx server, no mpirun) run on mpiv; run by `make check` in a private one-node
# Slurm (slurm.sh).
#
# p2p_sizes and collectives at -n 4, mt_stress at -n 2 (it takes exactly 2), all with
# --overcommit (more tasks than the node's CPUs), under OMPI_MCA_pml=mpiv (no fallback: if
# mpiv declines, the job fails) and OMPI_MCA_pml_mpiv_verbose=2. Each must pass, and every
# task must report "pml mpiv: selected candidate" (mpiv, not ob1, ran it).
#
# Environment as for test/mpi/run.sh (MPIV_TEST_TOP_BUILDDIR, MPIV_TEST_OMPI_PKGLIBDIR,
# MPIV_TEST_REQUIRE_PML), and MPIV_SLURM_TIMEOUT: seconds before one srun counts as hung
# (default 120). Exits 77 (automake: SKIP) with the reason when Slurm cannot run here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Start the private Slurm around this script: slurm.sh runs it again with MPIV_SLURM set and
# stops Slurm however it ends.
if [ -z "${MPIV_SLURM:-}" ]; then
    exec "$here/slurm.sh" run "$0" "$@"
fi

top_builddir=${MPIV_TEST_TOP_BUILDDIR:-$(pwd)}
time_limit=${MPIV_SLURM_TIMEOUT:-120}

# The uninstalled component and libmpiv, found as run.sh finds them (an installed copy in
# ~/.openmpi/components would shadow the build).
component_dir=$top_builddir/ompi-component/.libs
if [ ! -f "$component_dir/mca_pml_mpiv.so" ]; then
    echo "mca_pml_mpiv.so is not in $component_dir; build ompi-component/"
    [ "${MPIV_TEST_REQUIRE_PML:-0}" = 1 ] && exit 1
    exit 77
fi
pkglibdir=${MPIV_TEST_OMPI_PKGLIBDIR:-}
if [ -z "$pkglibdir" ]; then
    pkglibdir=$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
fi
# srun passes the environment on to the tasks (--export=ALL, its default).
export OMPI_MCA_pml=mpiv OMPI_MCA_pml_mpiv_verbose=2
export OMPI_MCA_mca_base_component_path=$component_dir:$pkglibdir
export LD_LIBRARY_PATH=$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

log=$(mktemp "${TMPDIR:-/tmp}/mpiv-slurm-check.XXXXXX")
trap 'rm -f "$log"' EXIT
status=0
start=$SECONDS

for test in "p2p_sizes 4" "collectives 4" "mt_stress 2"; do
    read -r name np <<<"$test"
    program=$top_builddir/test/mpi/$name
    if [ ! -x "$program" ]; then
        echo "FAIL $name: $program not found (make check builds it)"
        status=1
        continue
    fi
    cmd=(srun --mpi=pmix -n "$np" --overcommit --time=5 "$program")
    echo "+ timeout $time_limit ${cmd[*]}"
    t0=$SECONDS
    rc=0
    timeout --kill-after=10 "$time_limit" "${cmd[@]}" >"$log" 2>&1 || rc=$?
    elapsed=$((SECONDS - t0))
    selected=$(grep -c "pml mpiv: selected candidate" "$log" || true)
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        cat "$log"
        echo "FAIL $name: no exit within $time_limit s under srun (hang?)"
        status=1
    elif [ $rc -ne 0 ] || ! grep -q "^PASS $name" "$log"; then
        cat "$log"
        echo "FAIL $name: srun exited $rc after $elapsed s"
        status=1
    elif [ "$selected" -ne "$np" ]; then
        cat "$log"
        echo "FAIL $name: passed, but $selected of $np tasks report mpiv selected (ob1 ran?)"
        status=1
    else
        echo "PASS $name: srun --mpi=pmix -n $np on mpiv ($selected tasks selected mpiv) in $elapsed s"
        grep -m1 "pml mpiv: selected candidate" "$log"
    fi
done
echo "srun tests: $([ $status -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit $status
