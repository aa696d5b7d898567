#!/bin/bash
# mpiv quick start for a fresh Debian 12 machine.
#
#   contrib/quickstart.sh         install missing Debian packages, build, install into
#                                 $MPIV_PREFIX (default ~/.local/mpiv) and the Open MPI
#                                 component into ~/.openmpi/components, then run the main
#                                 job: `bench/compare --quick` (mpiv against ob1, ucx and
#                                 MPICH; under 5 minutes on 2 cores), printing the table and
#                                 where the plots are
#   contrib/quickstart.sh test    the same set-up, then `make check`
#
# Environment: MPIV_BUILD_DIR (default <source>/_build), MPIV_PREFIX, MPIV_JOBS (default nproc).
set -euo pipefail

mode=${1:-run}
case "$mode" in
  run|test) ;;
  *) echo "usage: $0 [test]" >&2; exit 2 ;;
esac

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MPIV_BUILD_DIR:-$src/_build}
prefix=${MPIV_PREFIX:-$HOME/.local/mpiv}
jobs=${MPIV_JOBS:-$(nproc)}

say() { printf '\n== %s\n' "$*"; }

# ---------------------------------------------------------------- packages
packages=(
  build-essential autoconf automake libtool autoconf-archive pkg-config
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin mpich libmpich-dev
  libgtest-dev libbenchmark-dev libboost-context-dev
  libucx-dev
  slurm-wlm munge
  spin gnuplot-nox python3
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---------------------------------------------------------------- build
if [ ! -x "$src/configure" ] || [ "$src/configure.ac" -nt "$src/configure" ]; then
  say "generating the build system"
  "$src/autogen.sh" >/dev/null
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || [ "$src/configure" -nt config.status ]; then
  say "configuring in $build (prefix $prefix)"
  "$src/configure" -q --prefix="$prefix" --with-ompi-component-dir="$HOME/.openmpi/components"
fi
say "building"
make -s -j"$jobs"

# Open MPI refuses to run as root unless told; --oversubscribe lets 2-core machines run -np 4.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "$mode" = test ]; then
  say "running the test suite (make check)"
  if ! make -s -j"$jobs" check; then
    # Show what failed: automake keeps each test's output in its .log file.
    for f in $(grep -l -E '^(FAIL|ERROR):' $(find . -name '*.trs') 2>/dev/null); do
      echo "---- ${f%.trs}.log"
      tail -n 60 "${f%.trs}.log"
    done
    exit 1
  fi
  exit 0
fi

say "installing into $prefix"
make -s install

# The main job runs the installed driver on the installed programs and component, from a
# folder outside the build tree, so it shows what a user of the installation gets.
compare=$prefix/libexec/mpiv/bench/compare
results=$build/results/quick-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
say "main job: bench/compare --quick, mpiv against ob1, ucx and MPICH" \
  "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
rc=0
(cd "$results" && "$compare" --quick --builddir none --out "$results") || rc=$?
plots=$(cd "$results" && ls -- *.png 2>/dev/null | tr '\n' ' ' || true)
cat <<EOF

Results in $results:
  table.md (the table above), summary.csv, raw.csv, runs.csv, runs.log
  plots: ${plots:-none (install gnuplot-nox for PNG plots)}
Each section's heading gives the unit and whether higher or lower is better; a cell is the
median (min–max) over the runs, and the X/ob1 columns divide medians by ob1's median.
README.md ("Benchmarks") and bench/README.md explain the numbers; $compare --million
runs 2 processes x 500,000 ULTs. Installed: $prefix (pkg-config: $prefix/lib/pkgconfig/mpiv.pc).
EOF
exit "$rc"
