#!/bin/bash
# device-check.sh: on a machine with an OpenCL driver but no build tools,
# run the bundle made by tools/device-bundle.sh: every test program through
# tests/run-on-devices.sh (device suites once per device, the GEMM suites on
# both GEMM paths, as two jobs), in parallel, then one `clremat compare`.
# Where libnvidia-opencl.so.1 is found but no ICD file names it, the run
# uses NVIDIA's alone. Logs and a summary go to $OUT (default
# /tmp/device-check).
#
# usage: [TESTS="test_a test_b"] tools/device-check.sh DIR [JOBS] [TEST_TIMEOUT_S]
#        (in the repository root)
set -u
dir=${1:?usage: tools/device-check.sh DIR [JOBS] [TEST_TIMEOUT_S]}
jobs=${2:-8}
limit=${3:-240}
out=${OUT:-/tmp/device-check}
top=$(pwd)
work=/tmp/dc
rm -rf "$work"
mkdir -p "$out" "$work/logs"
tar -C "$work" -xJf "$dir/bundle.tar.xz" || exit 2
echo "bundle of commit $(cat $work/COMMIT)"

export LD_LIBRARY_PATH=$work/lib
ldconfig -p | grep -q 'libstdc++.so.6 ' || LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$work/libfb

# NVIDIA's driver may be mounted without an ICD file naming it (on the
# borrowed H200 only PoCL's was installed): where libnvidia-opencl.so.1 is
# found and no ICD file names it, the run uses a vendors folder holding just
# NVIDIA's. OCL_ICD_VENDORS, if set, is used as it is.
if [ -z "${OCL_ICD_VENDORS:-}" ] && ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
    lib=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
    [ -n "$lib" ] || lib=$(find /usr/local/nvidia /usr/lib /usr/lib64 /lib /opt -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
    if [ -n "$lib" ]; then
        mkdir -p $work/icd && echo "$lib" > $work/icd/nvidia.icd
        export OCL_ICD_VENDORS=$work/icd
    fi
fi
echo "ICD: ${OCL_ICD_VENDORS:-$(cat /etc/OpenCL/vendors/*.icd 2>/dev/null | tr '\n' ' ')}"

export CLREMAT_TOOL=$work/bin/tools/clremat CLREMAT_MODELS=$top/models CLREMAT_SRCDIR=$top
export CLREMAT_BUILDDIR=$work/bin CK_DEFAULT_TIMEOUT=120 XDG_CACHE_HOME=$work/cache
export CLREMAT_FUZZ_CORPUS=$top/fuzz/corpus
"$CLREMAT_TOOL" devices --json > "$out/devices.json" 2>&1 || { cat "$out/devices.json"; exit 4; }
cat "$out/devices.json"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv

# The slowest suites first, so that the parallel run ends soonest.
first="test_soak test_train test_fit test_remat test_faults test_hf test_llm test_precision test_compare
test_keras test_layers_llm test_attention_flash test_accumulate test_offload test_fused test_layers_conv"
all=$( (for t in $first; do echo "$t"; done; ls $work/bin/tests) | awk '!seen[$0]++')
# test_layering reads the build's object files, which the bundle lacks
all=$(printf '%s\n' $all | grep -v '^test_layering$')
[ -n "${TESTS:-}" ] && all=$TESTS   # a list of program names narrows the run
# The GEMM suites run once per GEMM path as two jobs (NAME@native,
# NAME@clblast), so the longest suites take half the wall time.
gemm_suites=$(sed -n 's/^GEMM_SUITES="\(.*\)"$/\1/p' "$top/tests/run-on-devices.sh")
runs=$(for t in $all; do
    case " $gemm_suites " in
        *" $t "*) echo "$t@native"; echo "$t@clblast" ;;
        *) echo "$t" ;;
    esac
done)
start=$(date +%s)
printf '%s\n' $runs | xargs -P "$jobs" -I{} sh -c '
    run=$1 limit=$2 top=$3 work=$4
    t=${run%@*} path=
    [ "$run" = "$t" ] || path=${run#*@}
    t0=$(date +%s)
    CLREMAT_GEMM=$path timeout "$limit" sh "$top/tests/run-on-devices.sh" "$work/bin/tests/$t" > "$work/logs/$run.log" 2>&1
    st=$?
    echo "$run $st $(( $(date +%s) - t0 ))s" >> "$work/status"' _ {} "$limit" "$top" "$work"
echo "tests took $(( $(date +%s) - start )) s"

# Summary: each program's exit (0 pass, 77 skip, 124 timeout) and Check's totals.
sort "$work/status" > "$out/status.txt"
awk '{n[$2 == 0 ? "pass" : ($2 == 77 ? "skip" : "fail")]++} END {for (k in n) print k, n[k]}' "$out/status.txt"
grep -h -E '^[0-9]+%: Checks: ' "$work"/logs/*.log |
    awk '{c += $3; f += $5; e += $7} END {printf "Check totals: %d checks, %d failures, %d errors\n", c, f, e}'
grep -v ' 0 ' "$out/status.txt" | sed 's/^/not passed: /'

"$CLREMAT_TOOL" compare models/transformer.json --devices all --remat none,full,activations \
    > "$out/compare.txt" 2>&1
echo "compare exit $?"; cat "$out/compare.txt"
tar -C "$work" -czf "$out/logs.tar.gz" logs status
