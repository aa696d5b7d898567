#!/bin/bash
# rsh-agent.sh: the "ssh" of the two-node set-up (twonode.sh), for
#   mpirun --mca plm_rsh_agent contrib/twonode/rsh-agent.sh --host mpiv-a:2,mpiv-b:2 ...
#
# Open MPI calls its agent like ssh: `agent [OPTIONS] HOST COMMAND...`, COMMAND being one
# shell command line split into words (typically `orted ...`, maybe behind a `PATH=...;`
# prefix). Like ssh, this agent joins the words with spaces and runs them with `sh -c`, but
# inside HOST's namespaces (twonode.sh exec) instead of over the network. The environment is
# inherited as it is (the nodes share the filesystem, so paths mean the same on both).
# MPIV_TWONODE_AGENT_LOG=FILE appends every call to FILE (to see what Open MPI asks for).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -n "${MPIV_TWONODE_AGENT_LOG:-}" ] && echo "rsh-agent: $*" >>"$MPIV_TWONODE_AGENT_LOG"

# ssh's options: skip them, and the argument of those that take one.
while [ $# -gt 0 ]; do
    case "$1" in
    --) shift; break ;;
    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "rsh-agent: usage: $0 [ssh options] HOST COMMAND..." >&2
    exit 255 # what ssh returns for its own errors
fi
host=${1#*@} # ssh's user@host
shift
exec "$here/twonode.sh" exec "$host" sh -c "$*"
