#!/bin/sh
# Regenerate the build system (configure, Makefile.in) from configure.ac and Makefile.am.
set -e
cd "$(dirname "$0")"
# The macro and aux folders hold only generated files (ignored by git); aclocal fails
# when the -I folder is missing, as it is in a fresh clone.
mkdir -p config build-aux
autoreconf --force --install -I config
