/* backend.h: internal interface of the OpenCL backend: the device context,
 * kernel lookup, launches (every launch goes through clremat_launch so it can
 * be profiled), and error reporting helpers shared by all modules. */
#ifndef CLREMAT_BACKEND_H
#define CLREMAT_BACKEND_H

#include "config.h"
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <stdarg.h>
#include "clremat.h"
#include "error.h"

/** One profiled launch: which layer, which phase, and its device time. */
typedef struct clremat_profile_rec {
    int layer;              /**< layer index, -1 for non-layer work */
    int phase;              /**< clremat_phase */
    cl_event event;         /**< released after collection */
    char kname[40];         /**< kernel name (the per-kernel breakdown of the profile) */
} clremat_profile_rec;

/** What a launch is part of, for the per-layer profile. */
typedef enum clremat_phase {
    CLREMAT_PHASE_FORWARD = 0,
    CLREMAT_PHASE_BACKWARD = 1,
    CLREMAT_PHASE_RECOMPUTE = 2,
    CLREMAT_PHASE_UPDATE = 3,
    CLREMAT_PHASE_OTHER = 4,
    CLREMAT_PHASE_COUNT = 5
} clremat_phase;

struct clremat_kernel_entry {
    char name[64];
    cl_kernel kernel;
};

struct clremat_ctx {
    clremat_device_info info;
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;         /**< in-order compute queue (profiling if supported) */
    cl_command_queue active_queue;  /**< queue launches go to (queue unless switched) */
    int queue_fell_back;            /**< 1 if profiling could not be enabled */
    cl_program program;             /**< kernels.cl built for this device */
    struct clremat_kernel_entry *kernels;
    size_t n_kernels, cap_kernels;
    clremat_pool *pool;
    /* profiling of launches */
    int profiling;                  /**< record events of launches */
    int cur_layer, cur_phase;       /**< label of launches being enqueued */
    clremat_profile_rec *prof;
    size_t n_prof, cap_prof;
    char last_error[CLREMAT_ERRMSG_LEN];
    /* GEMM path and workspace */
    int gemm_path;                  /**< clremat_gemm_path; AUTO until resolved */
    clremat_buf *gemm_ws;           /**< GEMM workspace of the running action (CLBlast path) or NULL */
    int dry_run;                    /**< 1: nothing is enqueued; clremat_gemm records workspace needs */
    size_t dry_ws;                  /**< largest GEMM workspace asked for during a dry run */
    /* native GEMM blocks compiled into the program (clremat_gemm_cpu's
     * GC_MC, GC_NC, GC_KC), chosen to fit the device's local memory */
    int gemm_mc, gemm_nc, gemm_kc;
    /* its register tile (GC_MR x GC_NR): 12 x 32 on devices with 16-wide
     * native float vectors (AVX-512), else 6 x 16 */
    int gemm_mr, gemm_nr;
    /* the most loop iterations one work-item may run, 0 for no limit:
     * Mesa's llvmpipe ends every work-item's loops after 65535 iterations in
     * all (backend/program.c, loop_budget.h; $CLREMAT_LOOP_BUDGET may set a
     * smaller one on any device, to test the split launches) */
    int64_t loop_budget;
    int loop_budget_env;            /**< 1: loop_budget is $CLREMAT_LOOP_BUDGET's */
    /* the native GEMM's share of it (three quarters), 0 for no limit */
    int64_t gemm_max_iterations;
    char build_options[256];        /**< clBuildProgram options of the program */
    /* memory-efficient attention's tile limits (attention_flash.c), read
     * once: wg 0 until then */
    struct {
        size_t wg;                  /**< smallest work-group limit of the device and the flash kernels, <= 64 */
        cl_ulong local_mem;         /**< the device's local memory, bytes */
        cl_ulong used[3];           /**< each flash kernel's own local memory (no argument set), bytes */
    } flash;
};

/** Sets the context's last error (printf-style) and returns status. ctx may be
 * NULL, then the thread's last error is set. */
int clremat_fail(clremat_ctx *ctx, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Looks up (and caches) a kernel of the context's program by name. */
int clremat_kernel(clremat_ctx *ctx, const char *name, cl_kernel *out);

/** Where the program's source came from, for messages: "kernels.cl" (the
 * embedded copy), or "CLREMAT_KERNELS's PATH" when that variable names a
 * source file. */
const char *clremat_program_origin(void);

/** Sets kernel arguments: pairs of (size_t size, const void *value), ended
 * by a size of 0. Returns an OpenCL status. */
int clremat_set_args(clremat_ctx *ctx, cl_kernel k, const char *kname, ...);

/** Enqueues a kernel on the active queue over dims dimensions, rounding each
 * global size up to a multiple of local (local may be NULL). The event is
 * kept for the profile when profiling is on. */
int clremat_launch(clremat_ctx *ctx, cl_kernel k, const char *kname, cl_uint dims,
                   const size_t *global, const size_t *local);

/** Fault injection for tests: on this thread, the k-th clremat_launch on ctx
 * from now (1-based) fails with status (an OpenCL code such as
 * CL_OUT_OF_RESOURCES or CL_INVALID_COMMAND_QUEUE, as a lost device or queue
 * reports it) without enqueuing anything; k 0 turns it off. Also starts the
 * launch count of clremat_ctx_launch_count. */
void clremat_ctx_fail_launch_at(clremat_ctx *ctx, uint64_t k, int status);

/** Launches on ctx since clremat_ctx_fail_launch_at was last called for it
 * on this thread (failed injected launches included); 0 for other contexts. */
uint64_t clremat_ctx_launch_count(const clremat_ctx *ctx);

/** Opens another queue on the context's device with the properties wanted;
 * where unsupported, drops them (out-of-order first, then profiling) and sets
 * *fell_back. */
int clremat_ctx_open_queue(clremat_ctx *ctx, cl_command_queue_properties wanted,
                           cl_command_queue *out, int *fell_back);

/** The OpenCL platform and device of an enumerated device. */
int clremat_device_handles(const clremat_device_info *info, cl_platform_id *p, cl_device_id *d);

/** The embedded kernels.cl source (generated at build time). */
extern const char clremat_kernels_source[];

/** Builds the program from $CLREMAT_KERNELS if set, else the embedded source. */
int clremat_build_program(clremat_ctx *ctx);

/** Labels the launches that follow with a layer and phase (for profiling). */
void clremat_ctx_set_label(clremat_ctx *ctx, int layer, int phase);

/** Waits for the active queue to finish. */
int clremat_finish(clremat_ctx *ctx);

/** Copies host data into a device buffer (blocking). */
int clremat_write(clremat_ctx *ctx, clremat_buf *buf, size_t offset, size_t bytes, const void *src);

/** Copies a device buffer into host memory (blocking). */
int clremat_read(clremat_ctx *ctx, const clremat_buf *buf, size_t offset, size_t bytes, void *dst);

/** Fills a device buffer with zeros. */
int clremat_zero(clremat_ctx *ctx, clremat_buf *buf);

/** Keeps an event of work enqueued outside clremat_launch (CLBlast) for
 * the profile under the current label; releases it when not profiling. */
int clremat_profile_event(clremat_ctx *ctx, cl_event ev, const char *kname);

/** The cl_mem of a pool buffer. */
static inline cl_mem clremat_mem(const clremat_buf *b) { return (cl_mem)b->mem; }

#endif /* CLREMAT_BACKEND_H */
