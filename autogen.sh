#!/bin/sh
# Regenerates the autotools build files (configure, Makefile.in, ...).
# Nothing generated is committed; run this once after cloning.
set -e
cd "$(dirname "$0")"
autoreconf -fi
