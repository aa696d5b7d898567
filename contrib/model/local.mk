# contrib/model: Promela models of the lock library, checked with spin by `make check`.
EXTRA_DIST += %reldir%/ticket.pml %reldir%/tlp.pml
dist_noinst_SCRIPTS += %reldir%/check_model.sh
if HAVE_SPIN
TESTS += %reldir%/check_model.sh
endif
