# contrib/: quick start, CI helpers, the lock model, APSM.
dist_noinst_SCRIPTS += %reldir%/quickstart.sh %reldir%/ci/sanitizers.sh %reldir%/ci/aarch64.sh %reldir%/ci/run_tests.sh
include contrib/model/local.mk
include contrib/apsm/local.mk
