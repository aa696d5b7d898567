mpivinclude_HEADERS += \
	%reldir%/mpiv/mpiv.h \
	%reldir%/mpiv/mpiv_cid.h \
	%reldir%/mpiv/mpiv_p2p.h \
	%reldir%/mpiv/mpiv_status.h \
	%reldir%/mpiv/mpix_endpoints.h
