/* context.c: a device context: the OpenCL context, the profiled in-order
 * compute queue, extra queues with property fallback, the memory pool over
 * OpenCL buffers, and blocking host<->device copies. */
#include "backend.h"
#include <clblast_c.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *cl_create(void *user, size_t bytes, int *status)
{
    clremat_ctx *ctx = user;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    *status = err;
    return err == CL_SUCCESS ? m : NULL;
}

static void cl_release(void *user, void *mem)
{
    (void)user;
    clReleaseMemObject((cl_mem)mem);
}

int clremat_ctx_open_queue(clremat_ctx *ctx, cl_command_queue_properties wanted,
                           cl_command_queue *out, int *fell_back)
{
    static const cl_command_queue_properties drop[] = {
        CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, CL_QUEUE_PROFILING_ENABLE};
    cl_int err;
    *fell_back = 0;
    *out = clCreateCommandQueue(ctx->context, ctx->device, wanted, &err);
    for (size_t i = 0; err == CL_INVALID_QUEUE_PROPERTIES || err == CL_INVALID_VALUE; i++) {
        if (i == sizeof drop / sizeof drop[0])
            break;
        if (!(wanted & drop[i]))
            continue;
        wanted &= ~drop[i];
        *fell_back = 1;
        *out = clCreateCommandQueue(ctx->context, ctx->device, wanted, &err);
    }
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "clCreateCommandQueue on %s failed: %s", ctx->info.name,
                            clremat_status_str(err));
    return CLREMAT_OK;
}

/* Contexts alive in this process (see clremat_ctx_destroy). */
static int live_contexts;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

int clremat_ctx_create(const char *selection, uint64_t mem_limit, clremat_ctx **out)
{
    clremat_ctx *ctx;
    cl_int err;
    int st;
    clremat_allocator alloc = {cl_create, cl_release, NULL};

    *out = NULL;
    { /* a misspelt CLREMAT_GEMM would otherwise be ignored without a word */
        const char *env = getenv("CLREMAT_GEMM");
        clremat_gemm_path gp;
        if (env && *env && clremat_gemm_path_parse(env, &gp) != CLREMAT_OK)
            return clremat_set_error(CLREMAT_ERR_INVALID_ARGUMENT,
                                     "CLREMAT_GEMM='%s': takes native, clblast or auto (or unset it)", env);
    }
    ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return clremat_set_error(CL_OUT_OF_HOST_MEMORY, "out of host memory");
    ctx->cur_layer = -1;
    ctx->cur_phase = CLREMAT_PHASE_OTHER;
    st = clremat_select_device(selection, &ctx->info);
    if (st != CLREMAT_OK)
        goto fail_quiet;
    st = clremat_device_handles(&ctx->info, &ctx->platform, &ctx->device);
    if (st != CLREMAT_OK)
        goto fail_quiet;
    {
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
        ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
    }
    if (err != CL_SUCCESS) {
        ctx->context = NULL;
        st = clremat_fail(ctx, err, "clCreateContext on %s failed: %s", ctx->info.name, clremat_status_str(err));
        goto fail;
    }
    pthread_mutex_lock(&live_lock);
    live_contexts++;
    pthread_mutex_unlock(&live_lock);
    st = clremat_ctx_open_queue(ctx, CL_QUEUE_PROFILING_ENABLE, &ctx->queue, &ctx->queue_fell_back);
    if (st != CLREMAT_OK)
        goto fail;
    ctx->active_queue = ctx->queue;
    alloc.user = ctx;
    /* without a limit given: the device's memory, or what is free of it
     * where the device says (AMD); no further headroom (docs/user-guide.md).
     * A limit can only lower that: above it, the check that refuses a step
     * before it runs would be off, and the driver left to fail (PoCL aborts
     * the process when its host allocation fails). */
    {
        const int free_known = ctx->info.free_mem_bytes && ctx->info.free_mem_bytes < ctx->info.global_mem_bytes;
        const uint64_t have = free_known ? ctx->info.free_mem_bytes : ctx->info.global_mem_bytes;
        if (mem_limit > have) {
            clremat_error_set_bytes(mem_limit, have);
            st = clremat_fail(ctx, CLREMAT_ERR_INVALID_ARGUMENT, "memory limit of %llu bytes is more than %s has "
                              "(%llu bytes%s): a limit can only lower the device's memory",
                              (unsigned long long)mem_limit, ctx->info.name, (unsigned long long)have,
                              free_known ? " free" : "");
            goto fail;
        }
        if (!mem_limit)
            mem_limit = have;
    }
    ctx->pool = clremat_pool_new(&alloc, mem_limit, ctx->info.max_alloc_bytes);
    if (!ctx->pool) {
        st = clremat_fail(ctx, CL_OUT_OF_HOST_MEMORY, "out of host memory");
        goto fail;
    }
    st = clremat_build_program(ctx);
    if (st != CLREMAT_OK)
        goto fail;
    *out = ctx;
    return CLREMAT_OK;
fail:
    /* keep the message for the caller, who has no context to ask */
    clremat_set_error(st, "%s", ctx->last_error);
fail_quiet:
    clremat_ctx_destroy(ctx);
    return st;
}

void clremat_ctx_destroy(clremat_ctx *ctx)
{
    int last;
    if (!ctx)
        return;
    pthread_mutex_lock(&live_lock);
    last = ctx->context && --live_contexts == 0;
    pthread_mutex_unlock(&live_lock);
    /* CLBlast keeps compiled programs (holding the context) in caches of its
     * own that are destroyed at process exit, after the OpenCL runtime may
     * be gone: under Oclgrind that release corrupted the heap ("corrupted
     * double-linked list" at exit of every process that used CLBlast). The
     * last context releases them while the runtime is alive. A later
     * context rebuilds CLBlast's kernels (PoCL's own kernel cache keeps
     * that cheap). */
    if (last)
        CLBlastClearCache();
    if (ctx->queue)
        clFinish(ctx->queue);
    for (size_t i = 0; i < ctx->n_prof; i++)
        clReleaseEvent(ctx->prof[i].event);
    free(ctx->prof);
    clremat_pool_free_all(ctx->pool);
    for (size_t i = 0; i < ctx->n_kernels; i++)
        clReleaseKernel(ctx->kernels[i].kernel);
    free(ctx->kernels);
    if (ctx->program)
        clReleaseProgram(ctx->program);
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->context)
        clReleaseContext(ctx->context);
    free(ctx);
}

const clremat_device_info *clremat_ctx_device(const clremat_ctx *ctx) { return &ctx->info; }

clremat_pool *clremat_ctx_pool(clremat_ctx *ctx) { return ctx->pool; }

void clremat_ctx_set_label(clremat_ctx *ctx, int layer, int phase)
{
    ctx->cur_layer = layer;
    ctx->cur_phase = phase;
}

int clremat_finish(clremat_ctx *ctx)
{
    cl_int err = clFinish(ctx->active_queue);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "clFinish failed: %s", clremat_status_str(err));
    return CLREMAT_OK;
}

int clremat_write(clremat_ctx *ctx, clremat_buf *buf, size_t offset, size_t bytes, const void *src)
{
    cl_int err;
    if (ctx->dry_run) /* a workspace dry run enqueues nothing */
        return CLREMAT_OK;
    if (offset + bytes > buf->bytes)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "write of %zu bytes at %zu past a %zu-byte buffer (%s)",
                            bytes, offset, buf->bytes, buf->tag ? buf->tag : "?");
    err = clEnqueueWriteBuffer(ctx->active_queue, clremat_mem(buf), CL_TRUE, offset, bytes, src, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "writing %zu bytes to %s failed: %s", bytes,
                            buf->tag ? buf->tag : "buffer", clremat_status_str(err));
    return CLREMAT_OK;
}

int clremat_read(clremat_ctx *ctx, const clremat_buf *buf, size_t offset, size_t bytes, void *dst)
{
    cl_int err;
    if (ctx->dry_run)
        return CLREMAT_OK;
    if (offset + bytes > buf->bytes)
        return clremat_fail(ctx, CLREMAT_ERR_INTERNAL, "read of %zu bytes at %zu past a %zu-byte buffer (%s)",
                            bytes, offset, buf->bytes, buf->tag ? buf->tag : "?");
    err = clEnqueueReadBuffer(ctx->active_queue, clremat_mem(buf), CL_TRUE, offset, bytes, dst, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "reading %zu bytes from %s failed: %s", bytes,
                            buf->tag ? buf->tag : "buffer", clremat_status_str(err));
    return CLREMAT_OK;
}

int clremat_zero(clremat_ctx *ctx, clremat_buf *buf)
{
    const float zero = 0.0f;
    cl_int err;
    if (ctx->dry_run)
        return CLREMAT_OK;
    err = clEnqueueFillBuffer(ctx->active_queue, clremat_mem(buf), &zero, sizeof zero, 0,
                              buf->bytes & ~(size_t)3, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return clremat_fail(ctx, err, "zero-filling %s failed: %s", buf->tag ? buf->tag : "buffer",
                            clremat_status_str(err));
    return CLREMAT_OK;
}
