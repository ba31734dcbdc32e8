#!/usr/bin/env python3
"""mkl_gemm.py: Intel MKL's cblas_sgemm on the MLP step's GEMM shapes, as a
second BLAS peer beside OpenBLAS (bench/README.md, "Issue 21: how close a
BLAS gets to the FMA peak here"). MKL is not a dependency and not in
Debian's main archive: it comes from PyPI into a scratch virtual
environment, and this script loads its libmkl_rt through ctypes:

    python3 -m venv /tmp/mklv && /tmp/mklv/bin/pip install mkl numpy
    /tmp/mklv/bin/python bench/mkl_gemm.py [--threads T] [--lib PATH] [SHAPE...]

SHAPE is MxNxK with an optional :nt, :tn or :tt suffix, as for
bench/gemm_bench. Prints the median GFLOP/s over 40 timed calls after 5
warm-up calls, and checks each product against numpy's."""
import argparse
import ctypes
import glob
import os
import sys
import time

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
STEP_SHAPES = ["256x1024x1024", "256x1024x1024:nt", "1024x1024x256:tn", "1024x1024x1024", "2048x2048x2048",
               "256x256x256"]


def find_lib():
    for root in [sys.prefix, "/tmp/mklv"]:
        hits = sorted(glob.glob(os.path.join(root, "lib", "libmkl_rt.so*")))
        if hits:
            return hits[-1]
    return None


def gflops(mkl, shape, reps=40):
    dims, _, tr = shape.partition(":")
    M, N, K = map(int, dims.split("x"))
    ta, tb = tr[:1] == "t", tr[1:2] == "t"
    rng = np.random.default_rng(0)
    A = rng.random((K, M) if ta else (M, K), dtype=np.float32)
    B = rng.random((N, K) if tb else (K, N), dtype=np.float32)
    C = np.zeros((M, N), np.float32)
    P = ctypes.c_void_p
    args = (ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, M, N, K, ctypes.c_float(1.0),
            P(A.ctypes.data), A.shape[1], P(B.ctypes.data), B.shape[1], ctypes.c_float(0.0), P(C.ctypes.data), N)
    for _ in range(5):
        mkl.cblas_sgemm(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mkl.cblas_sgemm(*args)
        times.append(time.perf_counter() - t0)
    ref = (A.T if ta else A).astype(np.float64) @ (B.T if tb else B).astype(np.float64)
    if not np.allclose(C, ref, rtol=1e-4, atol=1e-3 * K):
        sys.exit("mkl_gemm: %s: MKL's product differs from numpy's" % shape)
    times.sort()
    return 2.0 * M * N * K / times[len(times) // 2] * 1e-9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lib", default=None, help="path of libmkl_rt.so (default: this Python's prefix, /tmp/mklv)")
    ap.add_argument("shapes", nargs="*", default=STEP_SHAPES)
    a = ap.parse_args()
    lib = a.lib or find_lib()
    if not lib:
        sys.exit("mkl_gemm: no libmkl_rt.so found: pip install mkl into a virtual environment and run its python")
    mkl = ctypes.CDLL(lib)
    mkl.MKL_Set_Num_Threads(ctypes.c_int(a.threads))
    for s in a.shapes:
        print("%-20s MKL %d threads %7.1f GFLOP/s" % (s, a.threads, gflops(mkl, s)))


if __name__ == "__main__":
    main()
