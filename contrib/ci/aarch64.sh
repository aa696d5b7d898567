#!/bin/bash
# CI stage 3: cross-build for aarch64 with Debian's g++-aarch64-linux-gnu and run the
# scheduler tests under qemu-aarch64. Installs the cross toolchain, qemu-user and the
# arm64 hwloc/GoogleTest libraries and C++ runtime (multiarch: the dynamic loader under
# qemu looks in /usr/lib/aarch64-linux-gnu, not in the cross toolchain's directory) when
# missing.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
jobs=${MPIV_JOBS:-$(nproc)}
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

need=()
for p in g++-aarch64-linux-gnu qemu-user libhwloc-dev:arm64 libgtest-dev:arm64 libstdc++6:arm64; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  printf '\n== installing %s\n' "${need[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || "${sudo_cmd[@]}" dpkg --add-architecture arm64
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

[ -x "$src/configure" ] || "$src/autogen.sh" >/dev/null
build="$src/_build-aarch64"
mkdir -p "$build"
cd "$build"
printf '\n== aarch64 cross build in %s\n' "$build"
[ -f Makefile ] || PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig \
  "$src/configure" -q --host=aarch64-linux-gnu --with-ompi=no
tests="test/gtest/sched/test_context test/gtest/sched/test_runset test/gtest/sched/test_sched test/gtest/sched/test_sync"
make -s -j"$jobs" $tests
file test/gtest/sched/test_context | grep -q aarch64
# qemu-user runs ~10x slower: MPIV_TEST_SLOW shrinks the stress loops as sanitizers do.
MPIV_TEST_SLOW=1 "$src/contrib/ci/run_tests.sh" --launcher qemu-aarch64 $tests
