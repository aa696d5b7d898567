# contrib/: quick start, CI helpers, the lock model, APSM.
dist_noinst_SCRIPTS += %reldir%/quickstart.sh %reldir%/ci/sanitizers.sh %reldir%/ci/aarch64.sh %reldir%/ci/run_tests.sh
include contrib/model/local.mk
include contrib/apsm/local.mk
# Instruction counts of the endpoints path against MPI_COMM_WORLD (callgrind; by hand).
dist_noinst_SCRIPTS += %reldir%/callgrind/ep_cost.sh
EXTRA_DIST += %reldir%/callgrind/ep_cost.c %reldir%/setup_lock.sh
# MPICH's MPI test suite against mpiv and a reference PML (by hand; needs an MPICH tree).
dist_noinst_SCRIPTS += %reldir%/mpich-suite/run.py
# Multi-node tests on one machine (network namespaces).
include contrib/twonode/local.mk
# srun --mpi=pmix under a private one-node Slurm.
include contrib/slurm/local.mk
