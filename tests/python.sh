#!/bin/sh
# python.sh: runs the Python package's pytest suite (python/tests/) against
# the freshly built library (.libs/libclremat.so, through CLREMAT_LIBRARY)
# and command (tools/clremat, for the --json equality checks), with the
# reference Python /usr/bin/python3. Skips (77) with a message when pytest or
# numpy is missing (Debian: apt-get install python3-pytest python3-numpy).
# A device test: run-on-devices.sh runs it once per device with
# CLREMAT_TEST_DEVICE set, which the training tests use (conftest.py).
py=${CLREMAT_PYTHON:-/usr/bin/python3}
src=${CLREMAT_SRCDIR:-${srcdir:-.}}
if ! "$py" -c 'import pytest, numpy' >/dev/null 2>&1; then
    echo "python: skipped: $py lacks pytest or numpy (apt-get install python3-pytest python3-numpy)" >&2
    exit 77
fi
CLREMAT_LIBRARY=${CLREMAT_LIBRARY:-$PWD/.libs/libclremat.so}
CLREMAT_TOOL=${CLREMAT_TOOL:-$PWD/tools/clremat}
CLREMAT_SRCDIR=$src
PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}
PYTHONDONTWRITEBYTECODE=1 # nothing written into the source tree (read-only under distcheck)
export CLREMAT_LIBRARY CLREMAT_TOOL CLREMAT_SRCDIR PYTHONPATH PYTHONDONTWRITEBYTECODE
exec "$py" -m pytest -q -p no:cacheprovider "$src/python/tests"
