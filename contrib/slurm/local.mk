# contrib/slurm/: a private one-node Slurm (slurm.sh) and the test that `srun --mpi=pmix`
# runs MPI programs on mpiv (check.sh; skips, exit 77, where Slurm cannot run).
dist_noinst_SCRIPTS += %reldir%/slurm.sh %reldir%/check.sh

if HAVE_OMPI
# A wrapper with test/mpi's settings from configure (test/mpi/local.mk) that runs check.sh.
%canon_reldir%_tests = %reldir%/srun-check.sh
TESTS += $(%canon_reldir%_tests)
CLEANFILES += $(%canon_reldir%_tests)
$(%canon_reldir%_tests): Makefile
	$(AM_V_GEN)$(MKDIR_P) %reldir% && { \
	  $(test_mpi_wrapper_env); \
	  echo "exec '$(abs_top_srcdir)/%reldir%/check.sh'"; \
	} >$@ && chmod +x $@
endif
