/* program.c: builds kernels.cl (embedded, or $CLREMAT_KERNELS for kernel
 * development) once per context, caches kernels by name, and launches them
 * on the active queue, keeping events for the per-layer profile. The built
 * program's binary is cached on disk (cache directory of gemm.h, keyed by
 * platform, device, driver and device versions, build options and a hash of
 * the source) and loaded with clCreateProgramWithBinary next time; any
 * failure there falls back to building from source.
 * CLREMAT_NO_PROGRAM_CACHE=1 turns the binary cache off. */
#include "backend.h"
#include "atomic_file.h"
#include "gemm.h"
#include "loop_budget.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a whole regular file into a malloc'd NUL-terminated string (a FIFO
 * or device is refused without blocking, see clremat_open_regular); what
 * names it in the error. NULL on failure, with the reason set. */
static char *read_file(const char *path, const char *what, size_t *len)
{
    FILE *f = NULL;
    char *buf = NULL;
    uint64_t n;
    if (clremat_open_regular(path, what, &f, &n) != CLREMAT_OK)
        return NULL;
    if (n > ((uint64_t)256 << 20)) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: %s is %llu bytes, more than the 256 MiB allowed", path, what,
                          (unsigned long long)n);
    } else if (!(buf = malloc((size_t)n + 1))) {
        clremat_set_error(CLREMAT_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    } else if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        clremat_set_error(CLREMAT_ERR_IO, "%s: cannot read %s: %s", path, what,
                          ferror(f) ? strerror(errno) : "file changed size");
        free(buf);
        buf = NULL;
    } else {
        buf[n] = 0;
        *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

#define BUILD_OPTIONS "-cl-std=CL1.2"

/* Native GEMM blocks (kernels.cl, clremat_gemm_cpu: GC_MC x GC_KC of A and
 * GC_KC x GC_NC of B in local memory), largest first: the first whose
 * panels fit the device's local memory is compiled in. 576/256/256 needs
 * 851968 bytes, 288/256/256 557056 (CPU devices such as PoCL offer 1 MiB
 * or more: PoCL 2 MiB, its L2; the taller A block halves how often each
 * work-group packs B, issue 21); 576/256/128 needs 425984 (PoCL on CPUs
 * with 512 KiB of L2, such as AMD's Zen 3, whose next smaller set,
 * 144/128/128, packed B 15 times at 2048 cubed: 576/256/128 ran it 1.16x
 * as fast, 1024^3:tt 1.09x, 512x2048x2048:nt 1.07x, the rest within the
 * scatter, in alternating bench/gemm_bench runs); devices with
 * 32 KiB (Mesa's llvmpipe, Oclgrind) get 48/64/64 (28672 bytes). MC is
 * rounded up to a multiple of the register tile's rows, NC of its columns
 * (every row is one for both tiles but the last). */
static const int gemm_blocks[][3] = {{576, 256, 256}, {288, 256, 256}, {576, 256, 128}, {144, 128, 128}, {96, 64, 128},
                                     {48, 64, 64},    {24, 32, 32},    {6, 16, 16}};

/* Picks the native GEMM register tile and blocks for the device and the
 * build options that compile them in. The tile: 12 x 32 (two float16 per
 * row, 24 accumulators) where the device's native float vector is 16 wide
 * (AVX-512: 32 vector registers), else 6 x 16 (two float8 per row, 12
 * accumulators: AVX2's 16 registers). $CLREMAT_GEMM_TILE=6x16 or 12x32
 * forces one (benchmarks, tests; another non-empty value is an error).
 * Results do not depend on the tile or
 * the blocks except through GC_KC, the same in every row above but the
 * smallest: every C element sums its products in k order within a
 * k-block of GC_KC. */
static int choose_build_options(clremat_ctx *ctx)
{
    cl_ulong local = 0;
    cl_uint vw = 0;
    const char *force = getenv("CLREMAT_GEMM_TILE");
    size_t n = sizeof gemm_blocks / sizeof gemm_blocks[0], i = 0;
    int mr, nr, mc, nc;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL) != CL_SUCCESS)
        local = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof vw, &vw, NULL) != CL_SUCCESS)
        vw = 0;
    if (force && strcmp(force, "12x32") == 0)
        vw = 16;
    else if (force && strcmp(force, "6x16") == 0)
        vw = 8;
    else if (force && *force)
        return clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT,
                            "CLREMAT_GEMM_TILE is '%s': not a native GEMM register tile (6x16 or 12x32)", force);
    mr = vw >= 16 ? 12 : 6;
    nr = vw >= 16 ? 32 : 16;
    for (;; i++) {
        mc = (gemm_blocks[i][0] + mr - 1) / mr * mr;
        nc = (gemm_blocks[i][1] + nr - 1) / nr * nr;
        if (i + 1 >= n || (cl_ulong)(mc + nc) * (cl_ulong)gemm_blocks[i][2] * 4 <= local)
            break;
    }
    ctx->gemm_mr = mr;
    ctx->gemm_nr = nr;
    ctx->gemm_mc = mc;
    ctx->gemm_nc = nc;
    ctx->gemm_kc = gemm_blocks[i][2];
    /* The direct convolution's whole-tile loops (CD_SPECIALISE in
     * kernels.cl): compiled in everywhere but on Mesa's drivers: a
     * one-shape bench/conv_bench run on llvmpipe, mostly the program's
     * build, took 63 s with them against 27 s, and the test runs there take
     * the CLBlast path (no direct convolution). */
    const int mesa = strstr(ctx->info.platform, "rusticl") || strstr(ctx->info.platform, "Clover");
    /* Mesa's llvmpipe (gallivm) counts every loop iteration of a
     * work-item against one budget of 65535 and then leaves the loops,
     * silently: measured with a one-loop kernel on rusticl (Debian 12's
     * Mesa 22.3), which returned 65535 for 70000 iterations. The native
     * GEMM's work-groups are sized to stay within three quarters of it by
     * an estimate of their iterations (clremat_gemm_split_choose). */
    ctx->loop_budget = mesa && strstr(ctx->info.name, "llvmpipe") ? CLREMAT_LLVMPIPE_LOOP_BUDGET : 0;
    {
        const char *env = getenv("CLREMAT_LOOP_BUDGET"); /* a smaller budget, for tests */
        char *end = NULL;
        long long b = 0;
        if (env && *env) { /* a whole positive number, else ignored ("1e30" is not 1) */
            errno = 0;
            b = strtoll(env, &end, 10);
            if (errno != 0 || *end != '\0')
                b = 0;
        }
        ctx->loop_budget_env = b > 0 && (ctx->loop_budget == 0 || b < ctx->loop_budget);
        if (ctx->loop_budget_env)
            ctx->loop_budget = b;
    }
    ctx->gemm_max_iterations = ctx->loop_budget > 0 && ctx->loop_budget < 4 ? 1 : ctx->loop_budget / 4 * 3;
    /* Contraction off (kernels.cl, CLREMAT_CONTRACT_OFF) everywhere but on
     * Mesa, whose llvmpipe kernels disagreed with each other that way.
     * Division and sqrt correctly rounded where the device offers it: OpenCL
     * otherwise allows 2.5 and 3 ulp, and then a compiler may divide one way
     * in one kernel and another way (a reciprocal, say) in the next, so two
     * kernels holding the same arithmetic could disagree (kernels.cl turns
     * contraction off for the same reason). */
    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) != CL_SUCCESS)
        fp = 0;
    if ((size_t)snprintf(ctx->build_options, sizeof ctx->build_options,
                         "%s -DGC_MC=%d -DGC_NC=%d -DGC_KC=%d -DGC_MR=%d -DGC_NR=%d -DCD_SPECIALISE=%d%s%s",
                         BUILD_OPTIONS, ctx->gemm_mc, ctx->gemm_nc, ctx->gemm_kc, mr, nr, !mesa,
                         mesa ? "" : " -DCLREMAT_CONTRACT_OFF",
                         (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? " -cl-fp32-correctly-rounded-divide-sqrt" : "") >=
        sizeof ctx->build_options)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "the program's build options exceed %zu characters",
                            sizeof ctx->build_options - 1);
    return CLREMAT_OK;
}
#define BIN_MAGIC "clremat-program-binary 2\n"

/* Key of a program build: device, driver, source and options. */
static uint64_t build_key(const clremat_ctx *ctx, const char *src, size_t len)
{
    const char *parts[] = {ctx->info.platform, ctx->info.name, ctx->info.driver_version, ctx->info.device_version,
                           ctx->build_options};
    uint64_t h = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        h = clremat_hash64(h, parts[i], strlen(parts[i]) + 1);
    return clremat_hash64(h, src, len);
}

static int binary_path(uint64_t key, char *out, size_t len)
{
    char dir[4096];
    if (getenv("CLREMAT_NO_PROGRAM_CACHE") || !clremat_cache_dir(dir, sizeof dir))
        return 0;
    return snprintf(out, len, "%s/program-%016" PRIx64 ".bin", dir, key) < (int)len;
}

/* Creates and builds the program from a cached binary; 0 on any failure
 * (missing, truncated or corrupted file -- checked against the length and
 * hash in its header before OpenCL sees it -- or rejected by the driver),
 * leaving ctx->program NULL. */
static int load_binary(clremat_ctx *ctx, const char *path)
{
    size_t len = 0, hl = strlen(BIN_MAGIC), bin_len;
    char *file = read_file(path, "program cache file", &len), *nl;
    const unsigned char *bin;
    unsigned long long want_len = 0, want_hash = 0;
    cl_int err, bstatus;
    if (!file)
        return 0;
    if (len <= hl || memcmp(file, BIN_MAGIC, hl) != 0 || !(nl = memchr(file + hl, '\n', len - hl)) ||
        sscanf(file + hl, "len %llu hash %llx", &want_len, &want_hash) != 2) {
        free(file);
        return 0;
    }
    bin = (const unsigned char *)nl + 1;
    bin_len = len - (size_t)(nl + 1 - file);
    if (bin_len == 0 || bin_len != want_len || clremat_hash64(0, bin, bin_len) != (uint64_t)want_hash) {
        free(file);
        return 0;
    }
    ctx->program = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &bin_len, &bin, &bstatus, &err);
    free(file);
    if (err != CL_SUCCESS || bstatus != CL_SUCCESS) {
        if (ctx->program)
            clReleaseProgram(ctx->program);
        ctx->program = NULL;
        return 0;
    }
    if (clBuildProgram(ctx->program, 1, &ctx->device, ctx->build_options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(ctx->program);
        ctx->program = NULL;
        return 0;
    }
    return 1;
}

/* Writes the built program's binary to path (atomically) behind a header
 * with its length and hash; failures are ignored (the cache is optional). */
static void save_binary(clremat_ctx *ctx, const char *path)
{
    size_t bin_len = 0, hl;
    unsigned char *buf, *bin;
    char head[128];
    if (clGetProgramInfo(ctx->program, CL_PROGRAM_BINARY_SIZES, sizeof bin_len, &bin_len, NULL) != CL_SUCCESS ||
        bin_len == 0 || !(bin = malloc(bin_len)))
        return;
    if (clGetProgramInfo(ctx->program, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
        hl = (size_t)snprintf(head, sizeof head, "%slen %llu hash %016llx\n", BIN_MAGIC,
                              (unsigned long long)bin_len, (unsigned long long)clremat_hash64(0, bin, bin_len));
        if ((buf = malloc(hl + bin_len)) != NULL) {
            memcpy(buf, head, hl);
            memcpy(buf + hl, bin, bin_len);
            clremat_write_atomic(path, buf, hl + bin_len);
            free(buf);
        }
    }
    free(bin);
}

int clremat_build_program(clremat_ctx *ctx)
{
    const char *override = getenv("CLREMAT_KERNELS");
    const char *src = clremat_kernels_source;
    const char *origin = "embedded kernels.cl";
    char *owned = NULL, bpath[4200];
    size_t len = strlen(src);
    cl_int err;
    int st = CLREMAT_OK, cached;

    if (override && *override) {
        owned = read_file(override, "CLREMAT_KERNELS source", &len);
        if (!owned)
            return clremat_fail(ctx, CLREMAT_ERR_IO, "CLREMAT_KERNELS: %s", clremat_last_error());
        src = owned;
        origin = override;
    }
    if ((st = choose_build_options(ctx)) != CLREMAT_OK)
        goto done;
    /* the binary cache: same device, driver, source and options */
    cached = binary_path(build_key(ctx, src, len), bpath, sizeof bpath);
    if (cached && load_binary(ctx, bpath))
        goto done;
    ctx->program = clCreateProgramWithSource(ctx->context, 1, &src, &len, &err);
    if (err != CL_SUCCESS) {
        st = clremat_fail(ctx, err, "clCreateProgramWithSource (%s) failed: %s", origin, clremat_status_str(err));
        goto done;
    }
    err = clBuildProgram(ctx->program, 1, &ctx->device, ctx->build_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[CLREMAT_ERRMSG_LEN - 256];
        size_t loglen = 0;
        log[0] = 0;
        clGetProgramBuildInfo(ctx->program, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log, log, &loglen);
        log[sizeof log - 1] = 0;
        st = clremat_fail(ctx, CLREMAT_ERR_BUILD, "building %s for %s failed (%s); build log:\n%s",
                          origin, ctx->info.name, clremat_status_str(err), log);
        clReleaseProgram(ctx->program);
        ctx->program = NULL;
    } else if (cached) {
        save_binary(ctx, bpath);
    }
done:
    free(owned);
    return st;
}

const char *clremat_program_origin(void)
{
    static _Thread_local char buf[4200];
    const char *override = getenv("CLREMAT_KERNELS");
    if (!override || !*override)
        return "kernels.cl";
    snprintf(buf, sizeof buf, "CLREMAT_KERNELS's %s", override);
    return buf;
}

int clremat_kernel(clremat_ctx *ctx, const char *name, cl_kernel *out)
{
    cl_int err;
    cl_kernel k;
    for (size_t i = 0; i < ctx->n_kernels; i++)
        if (strcmp(ctx->kernels[i].name, name) == 0) {
            *out = ctx->kernels[i].kernel;
            return CLREMAT_OK;
        }
    k = clCreateKernel(ctx->program, name, &err);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "kernel '%s' not found in %s: %s", name, clremat_program_origin(),
                            clremat_status_str(err));
    if (ctx->n_kernels == ctx->cap_kernels) {
        size_t cap = ctx->cap_kernels ? 2 * ctx->cap_kernels : 32;
        struct clremat_kernel_entry *n = realloc(ctx->kernels, cap * sizeof *n);
        if (!n) {
            clReleaseKernel(k);
            return clremat_fail(ctx, CL_OUT_OF_HOST_MEMORY, "out of host memory");
        }
        ctx->kernels = n;
        ctx->cap_kernels = cap;
    }
    snprintf(ctx->kernels[ctx->n_kernels].name, sizeof ctx->kernels[0].name, "%s", name);
    ctx->kernels[ctx->n_kernels++].kernel = k;
    *out = k;
    return CLREMAT_OK;
}

int clremat_set_args(clremat_ctx *ctx, cl_kernel k, const char *kname, ...)
{
    va_list ap;
    cl_uint idx = 0;
    int st = CLREMAT_OK;
    va_start(ap, kname);
    for (;;) {
        size_t size = va_arg(ap, size_t);
        const void *val;
        cl_int err;
        if (size == 0)
            break;
        val = va_arg(ap, const void *);
        err = clSetKernelArg(k, idx, size, val);
        if (err != CL_SUCCESS) {
            st = clremat_fail(ctx, err, "setting argument %u of kernel %s failed: %s", idx, kname,
                              clremat_status_str(err));
            break;
        }
        idx++;
    }
    va_end(ap);
    return st;
}

/* Launch fault injection (tests): per thread, for one context. */
static __thread struct {
    const clremat_ctx *ctx;
    uint64_t countdown;     /* 0: off */
    int status;
    uint64_t launches;      /* launches of ctx since the fault was set */
} launch_fault;

void clremat_ctx_fail_launch_at(clremat_ctx *ctx, uint64_t k, int status)
{
    launch_fault.ctx = ctx;
    launch_fault.countdown = k;
    launch_fault.status = status;
    launch_fault.launches = 0;
}

uint64_t clremat_ctx_launch_count(const clremat_ctx *ctx)
{
    return launch_fault.ctx == ctx ? launch_fault.launches : 0;
}

int clremat_launch(clremat_ctx *ctx, cl_kernel k, const char *kname, cl_uint dims,
                   const size_t *global, const size_t *local)
{
    size_t g[3];
    cl_event ev = NULL;
    cl_int err;
    if (ctx->dry_run)
        return CLREMAT_OK;
    if (launch_fault.ctx == ctx) {
        launch_fault.launches++;
        if (launch_fault.countdown && --launch_fault.countdown == 0)
            return clremat_fail(ctx, launch_fault.status, "launching kernel %s failed: %s (fault injected for testing)",
                                kname, clremat_status_str(launch_fault.status));
    }
    for (cl_uint i = 0; i < dims; i++) {
        g[i] = global[i] ? global[i] : 1;
        if (local && local[i])
            g[i] = (g[i] + local[i] - 1) / local[i] * local[i];
    }
    err = clEnqueueNDRangeKernel(ctx->active_queue, k, dims, NULL, g, local, 0, NULL,
                                 ctx->profiling ? &ev : NULL);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "launching kernel %s failed: %s", kname, clremat_status_str(err));
    return clremat_profile_event(ctx, ev, kname);
}

int clremat_profile_event(clremat_ctx *ctx, cl_event ev, const char *kname)
{
    if (ev && !ctx->profiling) {
        clReleaseEvent(ev);
        return CLREMAT_OK;
    }
    if (ev) {
        if (ctx->n_prof == ctx->cap_prof) {
            size_t cap = ctx->cap_prof ? 2 * ctx->cap_prof : 256;
            clremat_profile_rec *n = realloc(ctx->prof, cap * sizeof *n);
            if (!n) {
                clReleaseEvent(ev);
                return clremat_fail(ctx, CL_OUT_OF_HOST_MEMORY, "out of host memory");
            }
            ctx->prof = n;
            ctx->cap_prof = cap;
        }
        ctx->prof[ctx->n_prof] = (clremat_profile_rec){ctx->cur_layer, ctx->cur_phase, ev, {0}};
        snprintf(ctx->prof[ctx->n_prof++].kname, sizeof ctx->prof[0].kname, "%s", kname ? kname : "?");
    }
    return CLREMAT_OK;
}
