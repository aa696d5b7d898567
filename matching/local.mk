# matching/: the concurrent hash table and the MPI matching rules (header-only: the
# engine is a template over the lock type).
noinst_HEADERS += \
	%reldir%/node.hpp \
	%reldir%/table.hpp \
	%reldir%/comm.hpp \
	%reldir%/comm_inl.hpp \
	%reldir%/private_comm.hpp
