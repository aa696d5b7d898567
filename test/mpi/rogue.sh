#!/bin/sh
# rogue.sh: a process writing a forged message into a peer's queue (test/mpi/rogue.c) must
# make the peer end the job with a message naming the writer, within 30 s, under pml mpiv
# (other PMLs have no such queue: skipped). Environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
case "${MPIV_TEST_PML:-mpiv}" in
mpiv | mpiv,*) ;;
*) echo "rogue: pml mpiv only"; exit 77 ;;
esac
log=${TMPDIR:-/tmp}/mpiv-rogue.$$
"$here/run.sh" --expect-abort rogue 2 >"$log" 2>&1
rc=$?
cat "$log"
want="process 1 (rank 1 of MPI_COMM_WORLD) wrote invalid data into shared memory"
if [ $rc -eq 0 ] && ! grep -qF "$want" "$log"; then
    echo "FAIL rogue: the job ended, but without the message: $want"
    rc=1
fi
rm -f "$log"
exit $rc
