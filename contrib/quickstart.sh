#!/bin/bash
# mpiv quick start for a fresh Debian 12 machine.
#
#   contrib/quickstart.sh         install missing Debian packages, build, install into
#                                 $MPIV_PREFIX (default ~/.local/mpiv), run the main job
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
say "main job: the ULT scheduler benchmark (bench/mpiv-bench-sched)"
./bench/mpiv-bench-sched --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_display_aggregates_only=true
cat <<EOF

Read ns_per_switch / ns_per_handoff and the Time column (per spawn+join): each mpiv row
sits next to its reference (Boost.Context fcontext, pthread condition variable, pthread
create+join) measured in the same run. Installed: $prefix (pkg-config: $prefix/lib/pkgconfig/mpiv.pc).
EOF
