"""bench.py: the clremat benchmarks, each measured side by side with its
peer in one run on this machine (driven by bench/run; see bench/README.md).

Sections (all by default; --only picks some):
  gemm         clremat GEMM (bench/gemm_bench, native and CLBlast paths)
               against OpenBLAS through numpy, 256..2048, non-square and
               transposed shapes: GFLOP/s (wall) and GFLOP per CPU-second;
               each shape's native and OpenBLAS runs back to back, the
               target read from their paired ratio
  mlp          a training step of bench/mlp1024.json (8 x (dense 1024 + GELU)
               + dense 10, batch 256, SGD momentum 0.9) against PyTorch CPU
               (2 threads), with and without checkpointing
  transformer  the same for models/transformer.json (batch 32, Adam)
  llama        the same for models/llama_tiny.json at T = 256 (batch 8, Adam;
               checkpointing: clremat list_of_layers:decoder_block, PyTorch
               checkpoint_sequential with a decoder block per segment)
  resnet20     the same for models/resnet20.json (batch 64, SGD momentum
               0.9; PyTorch in channels_last), plus the convolutions' share
               of clremat's step from --profile
  remat        step-time overhead of each remat mode against the recompute
               FLOPs the planner predicted (bench/remat_pair: the mode's
               and none's steps in turn in one process, the trainers
               created in both orders)
  stream       bytes per second of the elementwise and optimizer kernels
               against a STREAM-like copy kernel on the same device
               (bench/stream_bench)
  fused        the MLP's peak with the optimizer update fused into the
               backward against --no-fused-update (predicted and measured),
               and their step times
  precision    mixed precision (issue 16): the MLP and the transformer
               in float32, mixed_float16 and mixed_bfloat16 in one run:
               step time (ratio to float32; target <= 1.1 on PoCL), kept
               activation bytes (ratio, about 0.5) and peaks, next to
               PyTorch CPU's float32 step; the target is read from paired
               steps in one process (bench/remat_pair MODE@PRECISION)
  mpi          data-parallel training, 1 and 2 ranks (mpirun) at the same
               global batch: step time, time in the gradient exchange and
               its share of the step, against PyTorch DistributedDataParallel
               (gloo) in 1 and 2 processes (bench/torch_ddp.py); needs a
               build configured with MPI

Every number is a median over repeated rounds; peers alternate within a
round so that background load hits both. Nothing here is part of make check.
"""
import argparse
import json
import math
import os
import resource
import tempfile
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "clremat")
GEMM = os.path.join(ROOT, "bench", "gemm_bench")
PY = "/usr/bin/python3"

GEMM_SHAPES = ["256x256x256", "512x512x512", "1024x1024x1024", "2048x2048x2048",
               "256x1024x1024", "1024x1024x256:tn", "256x1024x1024:nt", "1024x1024x1024:tt",
               "2048x512x1024", "512x2048x2048:nt", "333x777x555"]

NUMPY_SRC = r'''
import sys, time, numpy as np
shape, reps = sys.argv[1], int(sys.argv[2])
d, tr = (shape.split(":") + ["nn"])[:2]
M, N, K = map(int, d.split("x"))
rng = np.random.default_rng(1)
a = rng.random((K, M) if tr[0] == "t" else (M, K), dtype=np.float32)
b = rng.random((N, K) if tr[1] == "t" else (K, N), dtype=np.float32)
A = a.T if tr[0] == "t" else a
B = b.T if tr[1] == "t" else b
A @ B
ts = []
c0 = time.process_time()
for _ in range(reps):
    t = time.perf_counter(); A @ B; ts.append(time.perf_counter() - t)
c1 = time.process_time()
ts.sort()
f = 2.0 * M * N * K
print(f / ts[len(ts) // 2] * 1e-9, f * reps / (c1 - c0) * 1e-9)
'''


# The OPENBLAS_CORETYPE the peers run with: None (OpenBLAS's own detection)
# unless choose_blas_coretype found a forced core type faster.
BLAS_CORETYPE = None


def numpy_env():
    """numpy's environment: OPENBLAS_L2_SIZE unset (it slows a current
    OpenBLAS; see bench/README.md), OPENBLAS_CORETYPE as choose_blas_coretype
    chose, 2 threads."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if BLAS_CORETYPE:
        env["OPENBLAS_CORETYPE"] = BLAS_CORETYPE
    env.setdefault("OPENBLAS_NUM_THREADS", "2")
    return env


def blas_env(**kw):
    """The environment of a PyTorch peer (Debian's torch calls the system
    OpenBLAS): os.environ with kw and the chosen OPENBLAS_CORETYPE."""
    env = dict(os.environ, **kw)
    env.pop("OPENBLAS_CORETYPE", None)
    if BLAS_CORETYPE:
        env["OPENBLAS_CORETYPE"] = BLAS_CORETYPE
    return env


def choose_blas_coretype():
    """OpenBLAS picks its kernels from the CPU model; a build that does not
    know the model falls back to a generic SSE3 kernel ("Prescott": 0.3.21
    on Emerald Rapids, family 6 model 207, runs at a quarter of its AVX-512
    kernel's speed). The peer gets its best configuration: OpenBLAS's own
    choice and each forced core type the CPU's flags allow (SkylakeX with
    AVX-512, Haswell with AVX2) are timed on 1024x1024x256:tn, 2 threads,
    best of 3 tries of 5 runs, and the fastest is used for numpy and
    PyTorch in every section. Prints the figures."""
    global BLAS_CORETYPE
    flags = ""
    try:
        flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
    except OSError:
        pass
    cands = [None] + (["SkylakeX"] if " avx512f" in flags else []) + (["Haswell"] if " avx2" in flags else [])
    best, figs = None, []
    for c in cands:
        BLAS_CORETYPE = c
        arch = json.loads(run([PY, "-c", "import numpy, threadpoolctl, json; "
                               "print(json.dumps(threadpoolctl.threadpool_info()))"], env=numpy_env()))
        arch = ",".join(str(l.get("architecture")) for l in arch) or "?"
        g = max(numpy_gflops("1024x1024x256:tn") for _ in range(3))
        figs.append("%s (%s) %.1f" % (c or "default", arch, g))
        if best is None or g > best[1]:
            best = (c, g)
    BLAS_CORETYPE = best[0]
    print("OpenBLAS core type, GFLOP/s at 1024x1024x256:tn: %s -> using %s" %
          (", ".join(figs), BLAS_CORETYPE or "OpenBLAS's own choice"))


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("bench: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r.stdout


def med(xs):
    return statistics.median(xs) if xs else float("nan")


# the MLP step's GEMM shapes and how many of each (forward, dX = dZ W^T, dW = x^T dZ; dense_1 has no dX)
MLP_GEMMS = {"256x1024x1024": 8, "256x1024x1024:nt": 7, "1024x1024x256:tn": 8}
QUEUED = 8  # GEMMs a timed run enqueues back to back in the "queued" columns
LATENCY_SHAPE = "12x32x1"  # one register tile: its time is the launch and the wait


def gemm_section(rounds, reps):
    print("== GEMM: clremat vs OpenBLAS (numpy), GFLOP/s, median of %d rounds x %d runs" % (rounds, reps))
    info = run([PY, "-c", "import numpy, threadpoolctl, json; print(json.dumps(threadpoolctl.threadpool_info()))"],
               env=numpy_env())
    libs = json.loads(info)
    blas = ", ".join("%s %s (%s, %s threads)" % (l.get("internal_api"), l.get("version"), l.get("architecture"),
                                                 l.get("num_threads")) for l in libs) or "unknown BLAS"
    print("numpy BLAS: " + blas)
    res = {s: {"native": [], "clblast": [], "numpy": [], "native_cpu": [], "numpy_cpu": [], "queued": []}
           for s in GEMM_SHAPES}
    latency = {"call": [], "queued": []}

    def native(s):
        f = run([GEMM, "--gemm", "native", "--reps", str(reps), s]).split()
        res[s]["native"].append(float(f[4]))
        res[s]["native_cpu"].append(float(f[10]))
        f = run([GEMM, "--gemm", "native", "--reps", str(reps), "--queued", str(QUEUED), s]).split()
        res[s]["queued"].append(float(f[4]))

    def numpy(s):
        w, c = run([PY, "-c", NUMPY_SRC, s, str(reps)], env=numpy_env()).split()
        res[s]["numpy"].append(float(w))
        res[s]["numpy_cpu"].append(float(c))

    def micros(shape, gflops):
        m, n, k = map(int, shape.split("x"))
        return 2.0 * m * n * k / (gflops * 1e9) * 1e6

    # Each shape's native and OpenBLAS runs are adjacent, their order
    # alternating from round to round, so that the host's speed, which
    # drifts by up to 2x from one minute to the next on the 2-core VMs, hits
    # both alike; CLBlast (not part of the target) runs once a round.
    for rnd in range(rounds):
        for s in GEMM_SHAPES:
            for f in ((native, numpy) if rnd % 2 == 0 else (numpy, native)):
                f(s)
        out = run([GEMM, "--gemm", "clblast", "--reps", str(reps)] +
                  [s for s in GEMM_SHAPES if not s.startswith("2048x2048")])
        for line in out.splitlines():
            f = line.split()
            res[f[0]]["clblast"].append(float(f[4]))
        for key, q in (("call", 1), ("queued", QUEUED)):
            f = run([GEMM, "--gemm", "native", "--reps", "100", "--queued", str(q), LATENCY_SHAPE]).split()
            latency[key].append(micros(LATENCY_SHAPE, float(f[4])))
    print("%-20s %9s %9s %9s %8s %8s %8s | %12s %12s %8s | %9s %8s" % (
        "shape MxNxK:tAtB", "native", "clblast", "numpy", "nat/np", "paired", "clb/np", "native/cpu-s", "numpy/cpu-s",
        "paired", "queued", "paired"))
    summary = {}
    for s in GEMM_SHAPES:
        r = res[s]
        n, c, p, nc, pc = (med(r["native"]), med(r["clblast"]), med(r["numpy"]), med(r["native_cpu"]),
                           med(r["numpy_cpu"]))
        pw = med([a / b for a, b in zip(r["native"], r["numpy"])])
        pcpu = med([a / b for a, b in zip(r["native_cpu"], r["numpy_cpu"])])
        pq = med([a / b for a, b in zip(r["queued"], r["numpy"])])
        summary[s] = (pw, pcpu, pq)
        print("%-20s %9.1f %9.1f %9.1f %8.2f %8.2f %8.2f | %12.1f %12.1f %8.2f | %9.1f %8.2f" % (
            s, n, c, p, n / p, pw, c / p, nc, pc, pcpu, med(r["queued"]), pq))
    print("(GFLOP/s from wall time; GFLOP per CPU-second counts all threads' CPU time, so it is less sensitive"
          " to other load on the machine; nat/np: ratio of the medians over rounds; paired: median over rounds of"
          " each round's ratio, native and OpenBLAS run back to back; queued: %d GEMMs enqueued back to back per"
          " timed run and one wait, as a training step's queue runs them, against the same OpenBLAS runs)" % QUEUED)
    print("launch latency: a %s GEMM (one register tile) takes %.1f us from the call to the end of the wait, "
          "%.1f us a GEMM with %d queued (median of %d rounds x 100 runs)" %
          (LATENCY_SHAPE, med(latency["call"]), med(latency["queued"]), QUEUED, rounds))
    worst = min((v[0], k) for k, v in summary.items())
    worst_cpu = min((v[1], k) for k, v in summary.items())
    worst_q = min((v[2], k) for k, v in summary.items())
    print("target: no shape below 0.9 of OpenBLAS (paired): lowest %.2f (%s) wall, %.2f (%s) CPU-time, %.2f (%s) "
          "queued -> %s" % (worst[0], worst[1], worst_cpu[0], worst_cpu[1], worst_q[0], worst_q[1],
                            "met" if worst[0] >= 0.9 else "NOT met"))
    print()


def clremat_step(model, args, steps, warmup, env=None):
    out = run([TOOL, "train", model, "--json", "--quiet", "--steps", str(steps), "--warmup", str(warmup)] + args,
              env=env)
    j = json.loads(out)
    if j["memory"]["measured_peak_bytes"] != j["memory"]["predicted_peak_bytes"]:
        sys.exit("bench: measured peak differs from the prediction: %s" % j["memory"])
    return j


def llama_256():
    """models/llama_tiny.json with its input at T = 256, in bench/ (made each run)."""
    with open(os.path.join(ROOT, "models", "llama_tiny.json")) as f:
        m = json.load(f)
    m["input"]["shape"] = [256]
    path = os.path.join(ROOT, "bench", "llama_tiny_256.json")
    with open(path, "w") as f:
        json.dump(m, f)
    return path


def torch_step(model, ckpt, steps, warmup):
    """PyTorch's step time with 2 intra-op threads; Debian's torch calls the
    system BLAS (OpenBLAS), whose own threads compete with torch's OpenMP
    threads, so both OPENBLAS_NUM_THREADS=1 and =2 are run and the faster is
    taken (the peer gets its best configuration)."""
    cmd = [PY, os.path.join(ROOT, "bench", "torch_models.py"), model, "--steps", str(steps), "--warmup",
           str(warmup), "--threads", "2"] + (["--checkpoint"] if ckpt else [])
    best = None
    for blas_threads in ("1", "2"):
        env = blas_env(OPENBLAS_NUM_THREADS=blas_threads, OMP_NUM_THREADS="2")
        t = json.loads(run(cmd, env=env).strip().splitlines()[-1])["step_ms_median"]
        best = t if best is None else min(best, t)
    return best


FMA_PEAK = os.path.join(ROOT, "bench", "fma_peak")


def flop_limits():
    """The machine's FP32 limits in GFLOP/s: (theoretical, how derived,
    nominal, how derived). Theoretical: bench/fma_peak's measured rate of
    independent vector FMAs on every CPU at once (cores x FMA units x lanes
    x 2 FLOPs x the clock they really run at, as one measurement).
    Nominal: the same product from /proc/cpuinfo's clock and 2 FMA units,
    printed for comparison only: on a virtual machine that clock is the
    nominal TSC one, which the cores in turbo exceed (OpenBLAS measured
    341 GFLOP/s against 332.8 from 2.60 GHz), so it is no limit."""
    mhz, flags = [], ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                mhz.append(float(line.split(":")[1]))
            elif line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    lanes = 16 if " avx512f" in flags else 8 if " avx2" in flags else 4
    ghz = (sum(mhz) / len(mhz) / 1000.0) if mhz else float("nan")
    nominal = os.cpu_count() * 2 * lanes * 2 * ghz
    nominal_how = "%d CPUs x 2 FMA units x %d lanes x 2 FLOP x %.2f GHz (/proc/cpuinfo)" % (os.cpu_count(), lanes,
                                                                                            ghz)
    f = dict(l.split()[:2] for l in run([FMA_PEAK]).splitlines() if not l.startswith("thread"))
    theo = float(f["fma_gflops"])
    how = ("measured by bench/fma_peak: independent %s-lane FMAs on all %d CPUs at once; the cores ran at %.2f GHz "
           "(a dependent add chain), %.1f FLOP a cycle a core" %
           (f.get("lanes", "?"), os.cpu_count(), float(f["clock_ghz"]),
            theo / os.cpu_count() / float(f["clock_ghz"])))
    return theo, how, nominal, nominal_how


def numpy_gflops(shape, reps=5):
    return float(run([PY, "-c", NUMPY_SRC, shape, str(reps)], env=numpy_env()).split()[0])


def numpy_cpu_gflops(shape, reps=5):
    """OpenBLAS's GFLOP per CPU-second on one thread (no spinning helper
    threads, so its CPU time is its work): a per-core practical limit that
    other load on the machine barely moves."""
    env = numpy_env()
    env["OPENBLAS_NUM_THREADS"] = "1"
    return float(run([PY, "-c", NUMPY_SRC, shape, str(reps)], env=env).split()[1])


def clremat_cpu_per_step(model, args, steps):
    """CPU seconds (all threads, user + system) of one clremat training step:
    the difference of a run of 2 + steps and a run of 2 steps (start-up,
    kernel compiles and warm-up cancel out)."""
    cpu = []
    for n in (2, 2 + steps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        run([TOOL, "train", model, "--quiet", "--steps", str(n), "--warmup", "1"] + args)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return (cpu[1] - cpu[0]) / steps


def model_section(name, model, clargs, remat_args, torch_name, rounds, steps, warmup, limits=False):
    print("== %s training step: clremat vs PyTorch CPU (2 threads), ms per step, median of %d rounds"
          % (name, rounds))
    cl, clr, tc, tcr, blas, cl_cpu, blas_cpu = [], [], [], [], [], [], []
    flops = None
    for _ in range(rounds):
        j = clremat_step(model, clargs, steps, warmup)
        flops = j["flops"]["step"]
        cl.append(j["step_time_ms"]["median"])
        if limits:  # OpenBLAS on the step's GEMM shapes (forward, dX, dW), in the same rounds
            blas.append({x: numpy_gflops(x) for x in MLP_GEMMS})
            blas_cpu.append(min(numpy_cpu_gflops(x) for x in MLP_GEMMS))
            cl_cpu.append(clremat_cpu_per_step(model, clargs, steps))
        tc.append(torch_step(torch_name, False, steps, warmup))
        clr.append(clremat_step(model, clargs + remat_args, steps, warmup)["step_time_ms"]["median"])
        tcr.append(torch_step(torch_name, True, steps, warmup))
    a, b, c, d = med(cl), med(tc), med(clr), med(tcr)
    # paired: each round's PyTorch step against the clremat step measured just before it, so that a
    # machine whose speed drifts between rounds (a shared host) shifts both sides of each ratio alike
    pr = med([t / x for t, x in zip(tc, cl)])
    prr = med([t / x for t, x in zip(tcr, clr)])
    print("%-34s %10s %10s %10s %10s" % ("", "clremat", "pytorch", "torch/cl", "paired"))
    print("%-34s %10.1f %10.1f %10.2f %10.2f" % ("no checkpointing", a, b, b / a, pr))
    print("%-34s %10.1f %10.1f %10.2f %10.2f" % ("checkpointing (%s | ckpt_seq)" % " ".join(remat_args), c, d,
                                                  d / c, prr))
    print("%-34s %10.2f %10.2f" % ("checkpointing / none", c / a, d / b))
    print("(torch/cl: ratio of the medians over rounds; paired: median over rounds of each round's ratio)")
    print("target: clremat no slower than PyTorch (torch/cl >= 1, paired): %.2f -> %s" % (pr, "met" if pr >= 1
                                                                                          else "NOT met"))
    if limits:
        theo, how, nominal, nominal_how = flop_limits()
        achieved = flops / (a * 1e-3) * 1e-9
        # OpenBLAS's time for the step's GEMMs at its rates on their shapes (FLOP-weighted), per round
        practical = med([sum(MLP_GEMMS.values()) / sum(w / r[x] for x, w in MLP_GEMMS.items()) for r in blas])
        slowest = med([min(r.values()) for r in blas])
        print("step: %.3g GFLOP (cost model) in %.1f ms = %.1f GFLOP/s" % (flops * 1e-9, a, achieved))
        print("FLOP limit, theoretical: %.1f GFLOP/s, %s; the step reaches %.2f of it" % (theo, how,
                                                                                         achieved / theo))
        print("  (from the nominal clock: %.1f GFLOP/s = %s, no limit where the cores run faster: the step "
              "reaches %.2f of it)" % (nominal, nominal_how, achieved / nominal))
        print("FLOP limit, practical: OpenBLAS (numpy) %.1f GFLOP/s on the step's GEMMs (256x1024x1024 x 8, :nt x 7, "
              "1024x1024x256:tn x 8, FLOP-weighted; the slowest shape %.1f), measured in the same rounds; the step "
              "reaches %.2f of it" % (practical, slowest, achieved / practical))
        # judged against the larger limit: a loaded machine slows OpenBLAS too, which would make a low
        # practical limit easy to meet
        print("target: >= 0.8 of the FLOP limit: %.2f (theoretical) / %.2f (practical) -> %s" %
              (achieved / theo, achieved / practical, "met" if achieved >= 0.8 * max(theo, practical) else
               "NOT met"))
        # by CPU time: robust to other load on a shared machine, judged per core
        rate = flops * 1e-9 / med(cl_cpu)
        print("by CPU time: the step takes %.1f CPU-ms = %.1f GFLOP per CPU-second; per core: theoretical %.1f, "
              "OpenBLAS 1 thread %.1f GFLOP per CPU-second (the slowest of the step's GEMM shapes, same rounds); "
              "the step reaches %.2f (theoretical) / %.2f (practical)" %
              (med(cl_cpu) * 1e3, rate, theo / os.cpu_count(), med(blas_cpu), rate / (theo / os.cpu_count()),
               rate / med(blas_cpu)))
        print("target: >= 0.5 of PyTorch CPU's speed (torch/cl >= 0.5): %.2f -> %s" %
              (b / a, "met" if b / a >= 0.5 else "NOT met"))
    print()


def conv_layer_names(model):
    """Last path components of the conv2d layers of a model file (blocks and
    repeats expanded by the tool keep them as the last component)."""
    names = set()

    def walk(items):
        for it in items:
            if "block" in it:
                walk(it["layers"])
            elif it.get("type") == "conv2d":
                names.add(it["name"])
    with open(model) as f:
        walk(json.load(f)["layers"])
    return names


def conv_share(model, args, steps):
    """The conv2d layers' share of the device time of the last profiled step
    (clremat train --profile's per-layer table: forward, backward, recompute,
    update ms)."""
    out = run([TOOL, "train", model, "--quiet", "--profile", "--steps", str(steps), "--warmup", "1"] + args)
    convs, conv_ms, total = conv_layer_names(model), 0.0, 0.0
    in_table = False
    for line in out.splitlines():
        f = line.split()
        if f[:2] == ["layer", "forward"]:
            in_table = True
            continue
        if not in_table or not f:
            continue
        if f[0] == "total":
            break
        ms = sum(float(v) for v in f[1:5])
        total += ms
        if f[0].split("/")[-1] in convs:
            conv_ms += ms
    return conv_ms / total if total > 0 else 0.0


PAIR = os.path.join(ROOT, "bench", "remat_pair")


def paired_ratio(model, args, pairs, warmup, mode):
    """step(mode) / step(none) by bench/remat_pair: the two trainers' steps
    in turn in one process, `pairs` rounds, the median per-round ratio. The
    trainer created first ran 0.5-1.5% faster than a later one with the same
    plan (bench/remat_pair.c), so this runs it twice, the trainers created in
    both orders, and returns the geometric means of the two wall and CPU
    ratios, with the first run's entries for none and the mode."""
    runs = []
    for order in ("forward", "reverse"):
        out = run([PAIR, "--rounds", str(pairs), "--warmup", str(warmup), "--create", order] + args +
                  [os.path.join(ROOT, model), mode])
        runs.append(json.loads(out)["modes"])
    wall = math.sqrt(runs[0][1]["wall_ratio"] * runs[1][1]["wall_ratio"])
    cpu = math.sqrt(runs[0][1]["cpu_ratio"] * runs[1][1]["cpu_ratio"])
    return wall, cpu, runs[0][0], runs[0][1]


def remat_section(rounds):
    """Each remat mode's step-time overhead against the recompute FLOP share
    the planner predicted. bench/remat_pair runs the mode's and none's
    trainers in one process and alternates their steps, so that the steps
    compared run within a fraction of a second of each other and load from
    other processes hits both sides of a pair; it reports the median of the
    per-round ratios step(mode) / step(none). paired_ratio runs it with the
    trainers created in both orders; that is repeated `rounds` times and the
    median taken."""
    print("== Remat overhead: measured step-time overhead vs the planner's recompute FLOPs, paired steps in one "
          "process, median of %d runs" % rounds)
    cases = [("models/transformer.json", ["--batch", "32"], 80,
              ["activations", "larger_than", "list_of_layers:encoder_block", "full"]),
             ("bench/mlp1024.json", ["--batch", "256", "--optimizer", "sgd"], 20, ["activations", "full"])]
    print("%-18s %-29s %8s %10s %9s %9s %9s %6s %6s" % ("model", "mode", "wall ms", "peak MB", "overhead",
                                                      "cpu over", "predicted", "wall/p", "cpu/p"))
    for model, args, pairs, modes in cases:
        runs = {m: [] for m in ["none"] + modes}
        for _ in range(rounds):
            for m in modes:
                wall, cpu, none_entry, entry = paired_ratio(model, args, pairs, 3, m)
                runs[m].append(dict(entry, wall_ratio=wall, cpu_ratio=cpu))
                runs["none"].append(none_entry)
        for m in ["none"] + modes:
            wall = med([r["wall_ms"] for r in runs[m]])
            over = med([r["wall_ratio"] for r in runs[m]]) - 1.0
            cover = med([r["cpu_ratio"] for r in runs[m]]) - 1.0
            pred = runs[m][0]["predicted_share"]
            peak = runs[m][0]["predicted_peak_bytes"] / 1e6
            r1 = "%.2f" % (over / pred) if pred > 0 else "-"
            r2 = "%.2f" % (cover / pred) if pred > 0 else "-"
            print("%-18s %-29s %8.1f %10.2f %8.1f%% %8.1f%% %8.2f%% %6s %6s" % (
                os.path.basename(model), m, wall, peak, 100 * over, 100 * cover, 100 * pred, r1, r2))
            if m == "activations":
                print("%-18s target: activations overhead <= 1%% of the step: %.1f%% (wall), %.1f%% (CPU time) -> %s"
                      % ("", 100 * over, 100 * cover, "met" if over <= 0.01 else "NOT met"))
            if m == "full":
                print("%-18s target: full overhead <= 1.1 x predicted: %s (wall), %s (CPU time) -> %s" %
                      ("", r1, r2, "met" if over / pred <= 1.1 else "NOT met"))
    print("(overhead = median over runs of the median per-round ratio step(mode) / step(none) - 1, each run the "
          "geometric mean of the ratios with the trainers created in both orders, from wall time and from the "
          "process's CPU time; predicted = recompute FLOPs / FLOPs of the step without remat; x/p = overhead / "
          "predicted; peak = the planner's predicted live peak of the step)")
    print()


STREAM = os.path.join(ROOT, "bench", "stream_bench")


def stream_section(rounds):
    print("== Bandwidth: elementwise and optimizer kernels vs a STREAM-like copy (bench/stream_bench, 8 Mi floats "
          "per array), median of %d runs" % rounds)
    runs = [json.loads(run([STREAM, "--floats", str(8 << 20), "--reps", "11"])) for _ in range(rounds)]
    print("%-20s %8s %6s %10s %8s %8s" % ("kernel", "arrays", "bytes", "GB/s", "of copy", "/ fp32"))
    worst = None
    for i, k in enumerate(runs[0]["kernels"]):
        gbs = med([r["kernels"][i]["gb_per_s"] for r in runs])
        ratio = med([r["kernels"][i]["of_copy"] for r in runs])
        vs = ("%8.2f" % med([r["kernels"][i]["vs_float32"] for r in runs])) if "vs_float32" in k else ""
        print("%-20s %8.2f %6d %10.2f %8.2f %s" % (k["kernel"], k["arrays"], k["element_bytes"], gbs, ratio, vs))
        if k["kernel"] != "copy" and (worst is None or ratio < worst[0]):
            worst = (ratio, k["kernel"])
    print("(bytes: each array read or written once per call, bias_grad reads 256 rows and writes one, batchnorm "
          "counts x (and dy) once per pass over it; the kernels alternate within each run and the ratio of each run "
          "is to that run's copy; _bf16 / _fp16: the mixed-precision kernels with every array in bfloat16 / binary16, "
          "/ fp32 = their time over the float32 kernel's on as many elements, 0.5 where bytes alone decide)")
    print("target: every kernel >= 0.5 of the copy's bytes/s: lowest %.2f (%s) -> %s" %
          (worst[0], worst[1], "met" if worst[0] >= 0.5 else "NOT met"))
    print()


def fused_section(rounds):
    model, args = "bench/mlp1024.json", ["--batch", "256", "--optimizer", "sgd"]
    print("== Fused update: the MLP (batch 256, SGD) with the optimizer update inside the backward vs "
          "--no-fused-update, median of %d rounds" % rounds)
    res = {}
    for _ in range(rounds):
        for name, extra in (("fused", []), ("unfused", ["--no-fused-update"])):
            plan = json.loads(run([TOOL, "plan", model, "--json"] + args + extra))
            j = clremat_step(model, args + extra, 8, 3)
            r = res.setdefault(name, {"ms": [], "pred": plan["memory"]["predicted_peak_bytes"]})
            r["ms"].append(j["step_time_ms"]["median"])
            r["measured"] = j["memory"]["measured_peak_bytes"]
            r["train_pred"] = j["memory"]["predicted_peak_bytes"]
            r["fixed"] = j["memory"]["fixed_bytes"]
    print("%-10s %16s %16s %14s %10s" % ("", "predicted peak", "measured peak", "fixed bytes", "ms/step"))
    for name in ("unfused", "fused"):
        r = res[name]
        print("%-10s %16d %16d %14d %10.1f" % (name, r["train_pred"], r["measured"], r["fixed"], med(r["ms"])))
    d = res["unfused"]["measured"] - res["fused"]["measured"]
    print("peak saved: %d bytes (%.1f MB) measured, %d predicted; fixed bytes %d lower (the gradients); "
          "step time fused / unfused %.3f" % (d, d / 1e6, res["unfused"]["train_pred"] - res["fused"]["train_pred"],
                                              res["unfused"]["fixed"] - res["fused"]["fixed"],
                                              med(res["fused"]["ms"]) / med(res["unfused"]["ms"])))
def precision_section(rounds, quick):
    cases = (("MLP (bench/mlp1024.json, batch 256, SGD)", "bench/mlp1024.json", ["--batch", "256", "--optimizer", "sgd"],
              "mlp", 6 if quick else 12, 3),
             ("transformer (models/transformer.json, batch 32, Adam)", "models/transformer.json", ["--batch", "32"],
              "transformer", 20 if quick else 40, 10))
    # the "staged" rows: every layer converting at its boundary
    # (CLREMAT_MIXED_STAGED=1), the launch the fused kernels replace
    precs = ("float32", "mixed_float16", "mixed_bfloat16", "mixed_float16 staged", "mixed_bfloat16 staged")
    staged_env = dict(os.environ, CLREMAT_MIXED_STAGED="1")
    print("== Mixed precision: the same step in float32 and in 16-bit activation storage, median of %d rounds"
          % rounds)
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    for name, model, args, torch_name, steps, warmup in cases:
        res = {p: {"ms": []} for p in precs}
        tc = []
        for _ in range(rounds):
            for p in precs:
                j = clremat_step(model, args + ["--precision", p.split()[0]], steps, warmup,
                                 staged_env if p.endswith("staged") else None)
                r = res[p]
                r["ms"].append(j["step_time_ms"]["median"])
                r["peak"] = j["memory"]["measured_peak_bytes"]
                r["kept"] = j["memory"]["kept_activation_bytes"]
                r["fixed"] = j["memory"]["fixed_bytes"]
                r["val"] = j["val_accuracy"]
            tc.append(torch_step(torch_name, False, steps, warmup))
        f = res["float32"]
        print(name)
        print("%-22s %10s %8s %14s %8s %14s %8s %12s" % ("", "ms/step", "/ fp32", "kept act bytes", "/ fp32",
                                                          "measured peak", "/ fp32", "fixed bytes"))
        for p in precs:
            r = res[p]
            print("%-22s %10.1f %8.2f %14d %8.3f %14d %8.3f %12d" % (p, med(r["ms"]), med(r["ms"]) / med(f["ms"]),
                                                                   r["kept"], r["kept"] / f["kept"], r["peak"],
                                                                   r["peak"] / f["peak"], r["fixed"]))
        print("%-22s %10.1f (PyTorch CPU float32, 2 threads, the faster of OpenBLAS threads 1 and 2)"
              % ("pytorch", med(tc)))
        print("unpaired (separate processes, minutes apart): mixed_float16 %.2f, mixed_bfloat16 %.2f x float32"
              % tuple(med(res[p]["ms"]) / med(f["ms"]) for p in precs[1:3]))
        # paired: float32 and a mixed precision stepped in turn in one
        # process (bench/remat_pair, paired_ratio), so load from elsewhere
        # hits both alike
        pairs = steps * 2
        runs = {p: [] for p in ("none@mixed_float16", "none@mixed_bfloat16")}
        for _ in range(rounds):
            for p in runs:
                w, c, base, _ = paired_ratio(model, args, pairs, warmup, p)
                if base["precision"] != "float32":
                    sys.exit("bench: %s is not a float32 model" % model)
                runs[p].append((w, c))
        wall = [med([r[0] for r in runs[p]]) for p in runs]
        cpu = [med([r[1] for r in runs[p]]) for p in runs]
        print("paired (steps in turn in one process, %d pairs x %d runs x both creation orders): mixed_float16 %.2f wall / %.2f CPU, "
              "mixed_bfloat16 %.2f wall / %.2f CPU x float32" % (pairs, rounds, wall[0], cpu[0], wall[1], cpu[1]))
        worst = max(wall)
        print("target: mixed no slower than 1.1 x float32 (paired, wall): %.2f -> %s"
              % (worst, "met" if worst <= 1.1 else "NOT met"))
        print("load average after: %.2f %.2f %.2f" % os.getloadavg())
        print()


def mpirun_prefix(np):
    pre = ["mpirun", "--oversubscribe", "-np", str(np)]
    if os.geteuid() == 0:
        pre.insert(1, "--allow-run-as-root")
    return pre


def torch_ddp(model, world, steps, warmup):
    """DDP's step time, OpenBLAS threads 1 and 2, the faster taken."""
    cmd = [PY, os.path.join(ROOT, "bench", "torch_ddp.py"), model, "--world", str(world), "--steps", str(steps),
           "--warmup", str(warmup), "--threads", "2"]
    best = None
    for blas_threads in ("1", "2"):
        env = blas_env(OPENBLAS_NUM_THREADS=blas_threads, OMP_NUM_THREADS=str(max(1, 2 // world)))
        t = json.loads(run(cmd, env=env).strip().splitlines()[-1])["step_ms_median"]
        best = t if best is None else min(best, t)
    return best


def mpi_section(rounds, quick):
    """1 and 2 ranks of `clremat train` at the same global batch on this
    machine's device (both ranks share it here), with the exchange's time
    and share from the report; PyTorch DDP the same way."""
    if "CLREMAT_HAVE_MPI 1" not in open(os.path.join(ROOT, "config.h")).read():
        print("== Data parallel: skipped (configured without MPI: apt-get install libopenmpi-dev openmpi-bin, "
              "then ./configure)\n")
        return
    print("== Data parallel: 1 and 2 ranks at the same global batch, ms per step, median of %d rounds" % rounds)
    print("%-22s %5s %9s %9s %7s %9s %9s %9s" % ("model", "ranks", "step ms", "comm ms", "comm %", "dev wait",
                                                  "torch ms", "torch/cl"))
    cases = [("transformer", "models/transformer.json", ["--batch", "32"], "transformer", 30 if quick else 60, 10),
             ("mlp1024", "bench/mlp1024.json", ["--batch", "256", "--optimizer", "sgd"], "mlp", 6 if quick else 12,
              3)]
    for name, model, args, tname, steps, warmup in cases:
        for np in (1, 2):
            cl, comm, share, wait, tc = [], [], [], [], []
            for _ in range(rounds):
                cmd = [TOOL, "train", model, "--json", "--quiet", "--steps", str(steps), "--warmup", str(warmup)] + args
                j = json.loads(run((mpirun_prefix(np) if np > 1 else []) + cmd))
                cl.append(j["step_time_ms"]["median"])
                if np > 1:
                    for r in j["data_parallel"]["per_rank"]:
                        if r["predicted_peak_bytes"] != r["measured_peak_bytes"]:
                            sys.exit("bench: rank %d's measured peak differs from the prediction" % r["rank"])
                    r0 = j["data_parallel"]["per_rank"][0]
                    comm.append(r0["comm_median_ms"])
                    share.append(r0["comm_share"])
                    wait.append(r0["device_wait_median_ms"])
                tc.append(torch_ddp(tname, np, steps, warmup))
            a, b = med(cl), med(tc)
            print("%-22s %5d %9.2f %9s %7s %9s %9.2f %9.2f" % (
                name, np, a, "%.2f" % med(comm) if comm else "-", "%.1f" % (100 * med(share)) if share else "-",
                "%.2f" % med(wait) if wait else "-", b, b / a))
    print("(comm = time rank 0 spent in the exchange per step: the all-to-all, the rank-ordered sum and the "
          "all-gather of every bucket, and the loss gather; comm % = its share of the step; dev wait = time "
          "waiting for the device to stage a bucket; both ranks share one device here, so 2 ranks do not "
          "run faster: docs/data-parallel.md gives the scaling model for N devices)")
    print()


def attention_section(rounds, quick, measure_max):
    """Plain against memory-efficient attention on models/long_context.json
    at sequence lengths 512..4096, batch 1, Adam: the planner's predicted
    peak of the none plan for both modes (no device needed), and where the
    step runs in reasonable time on the device (T <= measure_max) the
    measured peak (asserted equal to the prediction) and the step time of
    both, beside PyTorch CPU's step on the same network with the softmax
    written out and with F.scaled_dot_product_attention (its flash kernel)."""
    print("== Attention: plain vs memory_efficient, models/long_context.json at batch 1 (Adam), none plan; "
          "step times median of %d rounds" % rounds)
    src = json.load(open(os.path.join(ROOT, "models", "long_context.json")))
    tmp = tempfile.mkdtemp(prefix="clremat-bench-")
    steps = 2 if quick else 3
    print("%6s %14s %14s %7s %14s %14s %10s %10s %10s %10s" % (
        "T", "plain peak", "mem-eff peak", "ratio", "plain meas", "mem-eff meas", "plain ms", "mem-eff ms",
        "torch ms", "sdpa ms"))
    for T in (512, 1024, 2048, 4096):
        peaks, meas, ms = {}, {}, {}
        for mode in ("plain", "memory_efficient"):
            m = json.loads(json.dumps(src))
            m["input"]["shape"] = [T]
            for blk in m["layers"]:
                for L in blk.get("layers", []):
                    if L.get("type") == "attention":
                        L["attention"] = mode
            path = os.path.join(tmp, "long_%s_%d.json" % (mode, T))
            with open(path, "w") as f:
                json.dump(m, f)
            j = json.loads(run([TOOL, "plan", path, "--batch", "1", "--remat", "none", "--json"]))
            peaks[mode] = j["memory"]["predicted_peak_bytes"]
            if T <= measure_max:
                t = []
                for _ in range(rounds):
                    r = clremat_step(path, ["--batch", "1", "--data", "sequence"], steps, 1)
                    meas[mode] = r["memory"]["measured_peak_bytes"]
                    t.append(r["step_time_ms"]["median"])
                ms[mode] = med(t)
        tp = ts = None
        if T <= measure_max:
            tp = med([torch_step_long("long", T, steps) for _ in range(rounds)])
            ts = med([torch_step_long("long_sdpa", T, steps) for _ in range(rounds)])

        def f(v, fmt):
            return fmt % v if v is not None else "-"
        print("%6d %14d %14d %6.1fx %14s %14s %10s %10s %10s %10s" % (
            T, peaks["plain"], peaks["memory_efficient"], peaks["plain"] / peaks["memory_efficient"],
            f(meas.get("plain"), "%d"), f(meas.get("memory_efficient"), "%d"), f(ms.get("plain"), "%.0f"),
            f(ms.get("memory_efficient"), "%.0f"), f(tp, "%.0f"), f(ts, "%.0f")))
    print("(peaks in bytes, fixed bytes included; meas = the pool's measured high-water, equal to the prediction "
          "or the run fails; '-' = not run: T above --attention-max-t; sdpa nan: PyTorch < 2.0 has no "
          "scaled_dot_product_attention)")
    print()


def torch_step_long(name, T, steps):
    cmd = [PY, os.path.join(ROOT, "bench", "torch_models.py"), name, "--T", str(T), "--steps", str(steps),
           "--warmup", "1", "--threads", "2"]
    best = None
    for blas_threads in ("1", "2"):
        env = blas_env(OPENBLAS_NUM_THREADS=blas_threads, OMP_NUM_THREADS="2")
        t = json.loads(run(cmd, env=env).strip().splitlines()[-1])["step_ms_median"]
        if t is None:  # not available in this PyTorch (printed as "n/a")
            return float("nan")
        best = t if best is None else min(best, t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=["gemm", "mlp", "transformer", "llama", "resnet20", "remat",
                                                        "stream", "fused", "mpi", "attention", "precision"])
    ap.add_argument("--attention-max-t", type=int, default=1024,
                    help="attention section: largest T run on the device (larger T: planned peaks only)")
    ap.add_argument("--rounds", type=int, default=3, help="repetitions of each comparison (median reported)")
    ap.add_argument("--quick", action="store_true", help="1 round, fewer steps (a smoke run)")
    a = ap.parse_args()
    sections = a.only or ["gemm", "mlp", "transformer", "llama", "resnet20", "remat", "stream", "fused", "mpi",
                          "attention", "precision"]
    rounds = 1 if a.quick else a.rounds
    os.chdir(ROOT)
    dev = run([TOOL, "devices"]).strip().splitlines()
    print("clremat benchmarks on %s (%d CPUs); device list:" % (os.uname().nodename, os.cpu_count()))
    for line in dev:
        print("  " + line)
    choose_blas_coretype()
    print()
    if "gemm" in sections:
        gemm_section(rounds, 3 if a.quick else 5)
    if "mlp" in sections:
        model_section("MLP 8x(dense 1024 + GELU) + dense 10, batch 256, SGD", "bench/mlp1024.json",
                      ["--batch", "256", "--optimizer", "sgd"], ["--remat", "full"], "mlp", rounds,
                      6 if a.quick else 12, 3, limits=True)
    if "transformer" in sections:
        model_section("transformer (models/transformer.json), batch 32, Adam", "models/transformer.json",
                      ["--batch", "32"], ["--remat", "list_of_layers:encoder_block"], "transformer", rounds,
                      20 if a.quick else 60, 10)
    if "llama" in sections:
        model_section("llama_tiny (models/llama_tiny.json) at T = 256, batch 8, Adam", llama_256(),
                      ["--batch", "8", "--data", "language"], ["--remat", "list_of_layers:decoder_block"], "llama",
                      rounds, 4 if a.quick else 10, 2)
    if "resnet20" in sections:
        args = ["--batch", "64", "--optimizer", "sgd"]
        model_section("ResNet-20 (models/resnet20.json), batch 64, SGD", "models/resnet20.json", args,
                      ["--remat", "list_of_layers:stage1,stage2,stage3"], "resnet20", rounds, 4 if a.quick else 10, 2)
        print("conv2d layers' share of clremat's device time per step (--profile): %.1f%%" %
              (100 * conv_share("models/resnet20.json", args, 3)))
        print()
    if "remat" in sections:
        remat_section(rounds)
    if "stream" in sections:
        stream_section(rounds)
    if "fused" in sections:
        fused_section(rounds)
    if "precision" in sections:
        precision_section(rounds, a.quick)
    if "mpi" in sections:
        mpi_section(rounds, a.quick)
    if "attention" in sections:
        attention_section(rounds, a.quick, 512 if a.quick else a.attention_max_t)


if __name__ == "__main__":
    main()
