#!/bin/sh
# keras_roundtrip.sh: runs tests/keras/roundtrip.py (nested.keras and the
# resnet.keras convnet: Keras -> clremat, 20
# steps under --remat full, -> Keras; the same batch evaluated in both) with
# the Python that has Keras 3: $CLREMAT_KERAS_PYTHON (.ci/run sets it to the
# venv it installs Keras in), else python3. Skips (77) with a message when
# Keras cannot be imported.
py=${CLREMAT_KERAS_PYTHON:-python3}
src=${CLREMAT_SRCDIR:-.}
tool=${CLREMAT_TOOL:-tools/clremat}
if ! command -v "$py" >/dev/null 2>&1; then
    echo "keras_roundtrip: skipped: no Python ($py); set CLREMAT_KERAS_PYTHON to a Python with Keras 3" >&2
    exit 77
fi
work=$(mktemp -d) || exit 99
trap 'rm -rf "$work"' EXIT
"$py" "$src/tests/keras/roundtrip.py" "$tool" "$src" "$work"
