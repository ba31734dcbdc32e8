#!/bin/sh
# remat_clblast.sh: runs the remat suite (tests/test_remat) on the CLBlast
# GEMM path with CLBlast's indirect kernels forced for every size, so that
# every GEMM takes a workspace from the pool: the planner's predicted peak
# must still equal the measured pool high-water to the byte, and every mode
# must stay bitwise identical. (make check runs test_remat itself on the
# path chosen for the device, native on PoCL.) It runs on every device:
# tests/run-on-devices.sh sees this script's CLREMAT_TEST_DEVICE and runs it
# once per device with CLREMAT_TEST_DEVICE set, which test_remat reads.
dir=$(dirname "${CLREMAT_TOOL:-./tools/clremat}")/../tests
CLREMAT_GEMM=clblast CLREMAT_CLBLAST_MIN_INDIRECT=1 exec "$dir/test_remat"
