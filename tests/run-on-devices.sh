#!/bin/sh
# run-on-devices.sh: make check's LOG_COMPILER. Runs a test program once per
# OpenCL device when it is a device test (one that reads
# CLREMAT_TEST_DEVICE), else once. Devices come from `clremat devices --json`
# ($CLREMAT_TOOL; CLREMAT_DEVICE narrows the list); a CLREMAT_TEST_DEVICE
# already set picks that one device only. Slow implementations (Mesa
# rusticl, Clover, oclgrind) run with CLREMAT_TEST_REDUCED=1 (small shapes,
# few steps).
#
# GEMM path: the end-to-end and layer suites (GEMM_SUITES below) run on
# each device once per GEMM path, with CLREMAT_GEMM=native and then
# CLREMAT_GEMM=clblast set explicitly, so no suite depends on a calibration
# measured earlier; CLREMAT_GEMM, if set, picks that path alone. Other
# device suites choose their paths themselves (test_gemm tests both,
# remat_clblast.sh forces CLBlast) or run no GEMM. One exception: on slow
# implementations (CLREMAT_TEST_REDUCED) the end-to-end suites (E2E_SUITES)
# run on CLBlast only, the path the calibration picks there: llvmpipe's
# native path is about five times slower, and running both made make check
# take 47 minutes (test_soak's 150 transformer steps alone passed the
# suite's 600 s timeout). The native path stays covered on those devices by
# the layer suites and test_gemm, and both paths run every suite on PoCL.
#
# Expected devices: CLREMAT_TEST_EXPECT, a comma-separated list of platform
# name substrings (.ci/run sets "Portable Computing Language,rusticl"), makes
# a device test fail when a platform it names has no device, or when the
# test skips (77) on a device. Without it a test that skips everywhere is
# reported skipped.
#
# A failing or unreadable `clremat devices --json` is a hard error (99),
# never a silent fallback to the default device.
#
# Exit: 0 when every run passed, 77 when every run skipped (and no device
# was expected), 99 on a hard error, else the first failing status. Each
# run's output goes to stdout (the test's .log) under a header naming the
# device and the GEMM path.
test_prog=$1
shift
name=$(basename "$test_prog")

GEMM_SUITES="test_train test_remat test_faults test_soak test_compare test_data_safety test_layers_core test_layers_seq test_fused test_accumulate test_offload test_keras test_layers_llm test_llm test_hf test_attention_flash test_attention_choice test_layers_conv test_precision"
E2E_SUITES="test_train test_remat test_faults test_soak test_compare test_data_safety test_fused test_accumulate test_offload test_llm test_hf test_precision"

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

hard_error() {
    echo "run-on-devices.sh: $name: $*"
    exit 99
}

if ! is_device_test "$test_prog"; then
    exec "$test_prog" "$@"
fi

# GEMM paths of this suite ("-": left to the test)
paths=-
case " $GEMM_SUITES " in
    *" $name "*) paths="native clblast" ;;
esac
[ -n "${CLREMAT_GEMM:-}" ] && paths=$CLREMAT_GEMM

# The devices, one "id|platform|name" a line.
tool=${CLREMAT_TOOL:-tools/clremat}
json=$("$tool" devices --json 2>&1)
st=$?
[ "$st" -eq 0 ] || hard_error "'$tool devices --json' failed (exit $st): $json"
case "$json" in
    '{"devices": ['*) ;;
    *) hard_error "'$tool devices --json' printed something that is not its device list: $json" ;;
esac
devices=$(printf '%s\n' "$json" |
    sed -n 's/.*"id": "\([0-9]*:[0-9]*\)", "platform": "\([^"]*\)", "name": "\([^"]*\)".*/\1|\2|\3/p')
n_entries=$(printf '%s\n' "$json" | grep -c '"id": ')
n_parsed=$(printf '%s\n' "$devices" | grep -c '|')
[ "$n_entries" -eq "$n_parsed" ] ||
    hard_error "read $n_parsed of the $n_entries devices '$tool devices --json' lists (has its format changed?): $json"

if [ -n "${CLREMAT_TEST_EXPECT:-}" ]; then
    rest=$CLREMAT_TEST_EXPECT
    while [ -n "$rest" ]; do
        want=${rest%%,*}
        [ "$want" = "$rest" ] && rest= || rest=${rest#*,}
        [ -z "$want" ] && continue
        printf '%s\n' "$devices" | cut -d'|' -f2 | grep -qF -- "$want" ||
            hard_error "no device of the expected platform '$want' (CLREMAT_TEST_EXPECT=$CLREMAT_TEST_EXPECT); devices: $json"
    done
fi

if [ -n "${CLREMAT_TEST_DEVICE:-}" ]; then
    line=$(printf '%s\n' "$devices" | grep "^$CLREMAT_TEST_DEVICE|")
    [ -n "$line" ] || line="$CLREMAT_TEST_DEVICE|?|?"
    devices=$line
fi

if [ -z "$devices" ]; then
    "$test_prog" "$@"   # no device: the test skips (77) by itself
    st=$?
    [ "$st" -eq 77 ] && [ -n "${CLREMAT_TEST_EXPECT:-}" ] && hard_error "skipped, but devices are expected"
    exit $st
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
    dname=${rest#*|}
    case "$platform" in
        *rusticl*|*Clover*|*Oclgrind*|*oclgrind*) reduced=1 ;;
        *) reduced=${CLREMAT_TEST_REDUCED:-0} ;;
    esac
    note=""
    [ "$reduced" = 1 ] && note=" (CLREMAT_TEST_REDUCED=1)"
    dev_paths=$paths
    if [ "$reduced" = 1 ] && [ "$paths" = "native clblast" ]; then
        case " $E2E_SUITES " in *" $name "*) dev_paths=clblast ;; esac
    fi
    for path in $dev_paths; do
        if [ "$path" = - ]; then
            label=""
            echo "== $name on device $id: $dname [$platform]$note"
            CLREMAT_TEST_DEVICE=$id CLREMAT_TEST_REDUCED=$reduced "$test_prog" "$@"
            st=$?
        else
            label=" gemm $path"
            echo "== $name on device $id: $dname [$platform]$note, CLREMAT_GEMM=$path"
            CLREMAT_GEMM=$path CLREMAT_TEST_DEVICE=$id CLREMAT_TEST_REDUCED=$reduced "$test_prog" "$@"
            st=$?
        fi
        echo "== $name on device $id$label: exit $st"
        if [ "$st" -eq 77 ] && [ -n "${CLREMAT_TEST_EXPECT:-}" ]; then
            echo "== $name skipped on device $id, where a device is expected (CLREMAT_TEST_EXPECT)"
            st=99
        fi
        if [ "$st" -eq 0 ]; then
            [ "$status" -eq 77 ] && status=0
        elif [ "$st" -ne 77 ]; then
            [ "$status" -eq 0 ] || [ "$status" -eq 77 ] && status=$st
        fi
    done
    IFS=$newline
done
IFS=$IFS_save
exit $status
