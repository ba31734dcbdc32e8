#!/bin/sh
# run-oclgrind.sh: `make check-oclgrind`. Runs the kernel correctness suites
# under Oclgrind, the OpenCL device simulator, with its out-of-bounds
# checks (always on), data-race detection and API checking, on reduced
# shapes (CLREMAT_TEST_REDUCED=1). A suite passes when its checks pass AND
# Oclgrind reported nothing. Each suite's output goes to <test>.oclgrind.out.
# Do not add -q/--quick: it runs only the first and last work-group.
# OCLGRIND_FLAGS adds options (e.g. --uninitialized, see docs/testing.md).
# Usage: tests/run-oclgrind.sh [TEST...]   (default: the five kernel suites)
set -u
tests=${*:-"tests/test_gemm tests/test_layers_core tests/test_layers_seq tests/test_optim tests/test_rng"}
if ! command -v oclgrind >/dev/null 2>&1; then
    echo "oclgrind not found (apt-get install oclgrind): skipping"
    exit 77
fi
status=0
for t in $tests; do
    log=$t.oclgrind.out
    start=$(date +%s)
    # Oclgrind is the only platform its runtime shows: device 0:0. It is
    # slow, so Check's per-test timeouts are stretched.
    CLREMAT_TEST_OCLGRIND=1 CLREMAT_TEST_REDUCED=1 CLREMAT_TEST_DEVICE=0:0 CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-20} \
        oclgrind --data-races --check-api ${OCLGRIND_FLAGS:-} "$t" >"$log" 2>&1
    st=$?
    # Oclgrind's diagnostics: kernel errors carry a "\tKernel: NAME" line,
    # API errors "Oclgrind - OpenCL runtime error detected".
    reports=$(grep -c -E '^	Kernel: |runtime error detected|^Oclgrind' "$log")
    result=PASS
    if [ "$st" -ne 0 ] || [ "$reports" -ne 0 ]; then
        result=FAIL
        status=1
    fi
    echo "$result: $t under oclgrind ($(($(date +%s) - start)) s, exit $st, $reports Oclgrind reports; log $log)"
    grep -E 'Checks: ' "$log" | tail -1
    [ "$reports" -ne 0 ] && grep -m 20 -A 6 -E '^(Invalid|.*data race|Uninitiali|Oclgrind)' "$log"
done
exit $status
