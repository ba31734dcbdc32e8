/* program.c: builds kernels.cl (embedded, or $CLREMAT_KERNELS for kernel
 * development) once per context, caches kernels by name, and launches them
 * on the active queue, keeping events for the per-layer profile. */
#include "backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a whole file into a malloc'd NUL-terminated string. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        if (buf) {
            buf[n] = 0;
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

int clremat_build_program(clremat_ctx *ctx)
{
    const char *override = getenv("CLREMAT_KERNELS");
    const char *src = clremat_kernels_source;
    const char *origin = "embedded kernels.cl";
    char *owned = NULL;
    size_t len = strlen(src);
    cl_int err;
    int st = CLREMAT_OK;

    if (override && *override) {
        owned = read_file(override, &len);
        if (!owned)
            return clremat_fail(ctx, CLREMAT_ERR_IO, "CLREMAT_KERNELS=%s cannot be read", override);
        src = owned;
        origin = override;
    }
    ctx->program = clCreateProgramWithSource(ctx->context, 1, &src, &len, &err);
    if (err != CL_SUCCESS) {
        st = clremat_fail(ctx, err, "clCreateProgramWithSource (%s) failed: %s", origin, clremat_status_str(err));
        goto done;
    }
    err = clBuildProgram(ctx->program, 1, &ctx->device, "-cl-std=CL1.2", NULL, NULL);
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
    }
done:
    free(owned);
    return st;
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
        return clremat_fail(ctx, err, "kernel '%s' not found in kernels.cl: %s", name, clremat_status_str(err));
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

int clremat_launch(clremat_ctx *ctx, cl_kernel k, const char *kname, cl_uint dims,
                   const size_t *global, const size_t *local)
{
    size_t g[3];
    cl_event ev = NULL;
    cl_int err;
    if (ctx->dry_run)
        return CLREMAT_OK;
    for (cl_uint i = 0; i < dims; i++) {
        g[i] = global[i] ? global[i] : 1;
        if (local && local[i])
            g[i] = (g[i] + local[i] - 1) / local[i] * local[i];
    }
    err = clEnqueueNDRangeKernel(ctx->active_queue, k, dims, NULL, g, local, 0, NULL,
                                 ctx->profiling ? &ev : NULL);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "launching kernel %s failed: %s", kname, clremat_status_str(err));
    return clremat_profile_event(ctx, ev);
}

int clremat_profile_event(clremat_ctx *ctx, cl_event ev)
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
        ctx->prof[ctx->n_prof++] = (clremat_profile_rec){ctx->cur_layer, ctx->cur_phase, ev};
    }
    return CLREMAT_OK;
}
