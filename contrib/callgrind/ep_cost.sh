#!/bin/sh
# ep_cost.sh: instructions per message of mpiv's point-to-point paths, on MPI_COMM_WORLD
# under MPI_THREAD_MULTIPLE against an endpoints communicator (one endpoint per process),
# counted by callgrind in one blocking 8-byte ping-pong (ep_cost.c, np 2, inline progress).
#
# Usage: contrib/callgrind/ep_cost.sh BUILD_DIR [N]
# Each mode runs N and 2N round trips; the difference of the inclusive counts, divided by N
# round trips and summed over both processes' halves, is the cost of one message's
#   send  (mpiv_p2p_isend: envelope, sequence number, queue push),
#   post  (engine::irecv: matching a receive against what waited, or queueing it),
#   arrive (engine::handle: the drained message matched and delivered),
# which excludes the time a blocking call spends polling for the peer (valgrind runs the
# two processes at its own pace, so polling counts say nothing). Needs valgrind, mpicc,
# addr2line and a build configured with Open MPI.
set -eu
build=${1:?usage: ep_cost.sh BUILD_DIR [N]}
n=${2:-2000}
build=$(cd "$build" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
for tool in valgrind mpicc mpirun addr2line callgrind_annotate python3; do
    command -v $tool >/dev/null || { echo "ep_cost.sh: $tool not found" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -I"$src/include" "$here/ep_cost.c" -o "$tmp/ep_cost" \
    -L"$build/ompi-component/.libs" -lmpiv-mpix
pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed 's/.*://')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for mode in world ep; do
    for k in 1 2; do
        mpirun --oversubscribe -np 2 --bind-to none \
            --mca mca_base_component_path "$build/ompi-component/.libs:$pkglib" \
            -x LD_LIBRARY_PATH="$build/.libs:$build/ompi-component/.libs" \
            --mca pml mpiv --mca pml_mpiv_progress inline \
            valgrind -q --tool=callgrind --callgrind-out-file="$tmp/cg.$mode.$k.%p" \
            "$tmp/ep_cost" $mode $((n * k)) >"$tmp/log" 2>&1 ||
            { cat "$tmp/log" >&2; exit 1; }
    done
done
python3 - "$tmp" "$n" <<'PY'
import glob, re, subprocess, sys
tmp, n = sys.argv[1], int(sys.argv[2])
want = {'send': 'mpiv_p2p_isend', 'post': 'mpiv::ep::engine::irecv(',
        'arrive': 'mpiv::ep::engine::handle('}
line = re.compile(r'^\s*([\d,]+)\s+\([^)]*\)\s+(\S+?):(\S+)(?:\s+\[(.+)\])?')
def costs(path):
    out = subprocess.run(['callgrind_annotate', '--inclusive=yes', '--auto=no',
                          '--threshold=100', path], capture_output=True, text=True).stdout
    got, last_obj = {}, None
    for l in out.splitlines():
        m = line.match(l)
        if not m:
            continue
        ir, fn, obj = int(m.group(1).replace(',', '')), m.group(3), m.group(4) or last_obj
        last_obj = obj or last_obj
        if fn.startswith('0x') and obj:
            fn = subprocess.run(['addr2line', '-f', '-C', '-e', obj, fn],
                                capture_output=True, text=True).stdout.split('\n')[0]
        for key, name in want.items():
            if fn.startswith(name) and key not in got:
                got[key] = ir
    return got
res = {}
for mode in ('world', 'ep'):
    tot = {k: 0 for k in want}
    for k, sign in ((1, -1), (2, 1)):
        for f in glob.glob(f'{tmp}/cg.{mode}.{k}.*'):
            c = costs(f)
            for key in want:
                tot[key] += sign * c.get(key, 0)
    # per message: each round trip is 2 messages (one each way), N more round trips
    res[mode] = {key: tot[key] / (2 * n) for key in want}
print(f'instructions per message (callgrind, {n} vs {2*n} round trips, both processes)')
print(f'{"path":8} {"world":>8} {"ep":>8} {"ep/world":>9}')
for key in want:
    w, e = res['world'][key], res['ep'][key]
    print(f'{key:8} {w:8.0f} {e:8.0f} {e / w if w else float("nan"):9.2f}')
w, e = sum(res['world'].values()), sum(res['ep'].values())
print(f'{"total":8} {w:8.0f} {e:8.0f} {e / w if w else float("nan"):9.2f}')
PY
