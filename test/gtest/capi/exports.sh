#!/bin/sh
# libmpiv.so exports its C API (mpiv_*) and nothing else, and keeps its internal function
# names in .symtab, so that perf and callgrind can name them (capi/libmpiv.map); and it
# needs no UCX library to load.
lib=${top_builddir:-.}/.libs/libmpiv.so
if ! command -v nm >/dev/null 2>&1; then
  echo "exports.sh: nm not found (Debian package: binutils)"; exit 77
fi
[ -f "$lib" ] || { echo "exports.sh: $lib not built (static only?)"; exit 77; }
# configure falls back to libtool's symbol list where the linker takes no version script.
if ! grep -q '^MPIV_EXPORT_LDFLAGS = -Wl,--version-script' "${top_builddir:-.}/Makefile"; then
  echo "exports.sh: this build exports through libtool's symbol list"; exit 77
fi
fail=0
extra=$(nm -D --defined-only "$lib" | awk '$3 !~ /^mpiv_/ {print $3}')
if [ -n "$extra" ]; then
  echo "exports.sh: exported beyond mpiv_*:"; echo "$extra"; fail=1
fi
api=$(nm -D --defined-only "$lib" | awk '$3 ~ /^mpiv_p2p_isend$/' | wc -l)
[ "$api" -eq 1 ] || { echo "exports.sh: mpiv_p2p_isend is not exported"; fail=1; }
# An internal function of the engine, by its demangled name, for the profilers.
if ! nm -C "$lib" | grep -q 'mpiv::ep::engine::progress()'; then
  echo "exports.sh: internal symbols are missing from .symtab (perf could not name them)"; fail=1
fi
# UCX's libraries are opened at run time, only by a job that needs them (ucx_api.hpp).
if command -v readelf >/dev/null 2>&1 && readelf -d "$lib" | grep -q 'NEEDED.*libuc[pstm]'; then
  echo "exports.sh: libmpiv.so needs a UCX library at load time:"
  readelf -d "$lib" | grep 'NEEDED.*libuc'; fail=1
fi
exit $fail
