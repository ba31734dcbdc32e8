#!/bin/sh
# run-on-devices.sh: make check's LOG_COMPILER. Runs a test program once per
# OpenCL device when it is a device test (one that reads
# CLREMAT_TEST_DEVICE), else once. Devices come from `clremat devices --json`
# ($CLREMAT_TOOL; CLREMAT_DEVICE narrows the list); a CLREMAT_TEST_DEVICE
# already set picks that one device only. Slow implementations (Mesa
# rusticl, Clover, oclgrind) run with CLREMAT_TEST_REDUCED=1 (small shapes,
# few steps). The GEMM path is left to the library (CLREMAT_GEMM if set,
# else the cached per-device calibration, which picks CLBlast on llvmpipe
# and the native kernels on PoCL by measurement). Exit: 0 when every run
# passed, 77 when every run skipped, else the first failing status. Each
# run's output goes to stdout (the test's .log) under a header naming the
# device.
test_prog=$1
shift

# A device test names CLREMAT_TEST_DEVICE; with a shared libclremat the
# program is a libtool wrapper and the binary lives in .libs/.
is_device_test() {
    d=$(dirname "$1")
    b=$(basename "$1")
    for f in "$1" "$d/.libs/$b" "$d/.libs/lt-$b"; do
        [ -f "$f" ] && grep -q CLREMAT_TEST_DEVICE "$f" 2>/dev/null && return 0
    done
    return 1
}

if [ -n "${CLREMAT_TEST_DEVICE:-}" ] || ! is_device_test "$test_prog"; then
    exec "$test_prog" "$@"
fi

tool=${CLREMAT_TOOL:-tools/clremat}
devices=$("$tool" devices --json 2>/dev/null |
    sed -n 's/.*"id": "\([0-9]*:[0-9]*\)", "platform": "\([^"]*\)", "name": "\([^"]*\)".*/\1|\2|\3/p')
if [ -z "$devices" ]; then
    exec "$test_prog" "$@"   # no device: the test skips (77) by itself
fi

status=77
newline='
'
IFS_save=$IFS
IFS=$newline
for dev in $devices; do
    IFS=$IFS_save
    id=${dev%%|*}
    rest=${dev#*|}
    platform=${rest%%|*}
    name=${rest#*|}
    case "$platform" in
        *rusticl*|*Clover*|*Oclgrind*|*oclgrind*) reduced=1 ;;
        *) reduced=${CLREMAT_TEST_REDUCED:-0} ;;
    esac
    note=""
    [ "$reduced" = 1 ] && note=" (CLREMAT_TEST_REDUCED=1)"
    echo "== $(basename "$test_prog") on device $id: $name [$platform]$note"
    CLREMAT_TEST_DEVICE=$id CLREMAT_TEST_REDUCED=$reduced "$test_prog" "$@"
    st=$?
    echo "== $(basename "$test_prog") on device $id: exit $st"
    if [ "$st" -eq 0 ]; then
        [ "$status" -eq 77 ] && status=0
    elif [ "$st" -ne 77 ]; then
        [ "$status" -eq 0 ] || [ "$status" -eq 77 ] && status=$st
    fi
    IFS=$newline
done
IFS=$IFS_save
exit $status
