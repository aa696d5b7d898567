# contrib/model: Promela models of the lock library, of sync's owned mode, of the PML's
# reused pthread waiter, of freeing destroyed communicators, of two-copy rendezvous, of
# context-id agreement for endpoints communicators, of the matching table's growth, of the
# shared-memory doorbell, of any-tag receives, of ULTs parked in an MCS queue and of the
# try-lock that names its holder, checked with spin by `make check`.
EXTRA_DIST += %reldir%/owned_sync.pml %reldir%/ticket.pml %reldir%/tlp.pml %reldir%/wait_any.pml \
	%reldir%/comm_reap.pml %reldir%/copy_slots.pml \
	%reldir%/ep_cid.pml %reldir%/table_grow.pml %reldir%/doorbell.pml \
	%reldir%/any_tag.pml %reldir%/mcs_park.pml %reldir%/lock_holder.pml
dist_noinst_SCRIPTS += %reldir%/check_model.sh
if HAVE_SPIN
TESTS += %reldir%/check_model.sh
endif
