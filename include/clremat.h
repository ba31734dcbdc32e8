/* clremat.h: the public C API of clremat, an OpenCL training backend with
 * activation rematerialization (gradient checkpointing).
 *
 * Every function that can fail returns an int status: CLREMAT_OK (0) on
 * success, an OpenCL error code (negative; core or extension) passed through
 * unchanged, or one of the clremat_status codes (-2001 and below, clear of
 * OpenCL's core and extension codes). Details of the
 * last failure are kept per context (clremat_ctx_last_error) and, for calls
 * made without a context, per thread (clremat_last_error). */
#ifndef CLREMAT_H
#define CLREMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

/** Status codes of the project itself; OpenCL codes pass through as they are. */
typedef enum clremat_status {
    CLREMAT_OK = 0,
    CLREMAT_ERR_OUT_OF_MEMORY = -2001,  /**< pool limit or device allocation failure */
    CLREMAT_ERR_INVALID_ARGUMENT = -2002, /**< bad argument to an API call */
    CLREMAT_ERR_NO_DEVICE = -2003,      /**< no OpenCL platform or device at all */
    CLREMAT_ERR_DEVICE_NOT_FOUND = -2004, /**< a device selection matched nothing */
    CLREMAT_ERR_BUILD = -2005,          /**< kernel program build failed (log in last error) */
    CLREMAT_ERR_IO = -2006,             /**< file could not be read or written */
    CLREMAT_ERR_PARSE = -2007,          /**< malformed model, data or weights file */
    CLREMAT_ERR_SHAPE = -2008,          /**< shapes do not fit together */
    CLREMAT_ERR_TOO_LARGE = -2009,      /**< buffer above the device's max allocation size */
    CLREMAT_ERR_NONFINITE = -2010,      /**< a loss or activation became NaN or Inf */
    CLREMAT_ERR_PLAN = -2011,           /**< remat policy invalid or plan does not fit */
    CLREMAT_ERR_MISMATCH = -2012,       /**< weights or data do not match the model */
    CLREMAT_ERR_BLAS = -2013,           /**< CLBlast reported an error */
    CLREMAT_ERR_INTERNAL = -2099        /**< broken internal invariant */
} clremat_status;

/** Short name of a status: clremat's own codes and OpenCL's (e.g. "CL_OUT_OF_RESOURCES"). */
const char *clremat_status_str(int status);

/** Message of the last failure on this thread that had no context to carry it. */
const char *clremat_last_error(void);

/* --------------------------------------------------------------- devices */

/** One OpenCL device as enumerated across every platform. */
typedef struct clremat_device_info {
    unsigned platform_index;      /**< P in a "P:D" selection */
    unsigned device_index;        /**< D in a "P:D" selection */
    char platform[128];           /**< platform name */
    char name[128];               /**< device name */
    char vendor[128];             /**< device vendor */
    char type[16];                /**< "cpu", "gpu", "accelerator" or "other" */
    char driver_version[128];      /**< CL_DRIVER_VERSION */
    char device_version[128];      /**< CL_DEVICE_VERSION */
    char opencl_c_version[128];    /**< CL_DEVICE_OPENCL_C_VERSION */
    unsigned compute_units;       /**< CL_DEVICE_MAX_COMPUTE_UNITS */
    uint64_t global_mem_bytes;    /**< CL_DEVICE_GLOBAL_MEM_SIZE */
    uint64_t max_alloc_bytes;     /**< CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    uint64_t free_mem_bytes;      /**< free memory where the device reports it (AMD's
                                       CL_DEVICE_GLOBAL_FREE_MEMORY_AMD), at enumeration; 0: not reported */
    int out_of_order;             /**< out-of-order queues supported */
    int profiling;                /**< queue profiling supported */
    int host_unified;             /**< CL_DEVICE_HOST_UNIFIED_MEMORY: device memory is host memory (PoCL), so
                                       offloading to the host frees nothing real */
} clremat_device_info;

/** Enumerates every device of every platform into a malloc'd array (free it
 * with free()). Zero devices is not an error: *count is 0. */
int clremat_list_devices(clremat_device_info **devices, size_t *count);

/** Resolves a selection: "P:D" index, "cpu"/"gpu"/"accelerator", or a
 * case-insensitive substring of the device or platform name. NULL or "" uses
 * $CLREMAT_DEVICE, else the first GPU, else the first device. On no match the
 * error (clremat_last_error) lists every device there is. */
int clremat_select_device(const char *selection, clremat_device_info *out);

/** Why no device may be listed where one is installed, for messages: ""
 * or "; PoCL is installed but cannot create its kernel cache in DIR ..."
 * (PoCL then lists no device), where the ICD loader would load PoCL (a
 * library in OCL_ICD_FILENAMES, an ICD file in the OCL_ICD_VENDORS folder
 * or that file, else in /etc/OpenCL/vendors, whose name mentions pocl). */
const char *clremat_no_device_hint(void);

/** clremat_select_device, with from naming where a non-empty selection came
 * from in the error ("--devices item 2"; clremat_select_device says
 * "--device"). */
int clremat_select_device_as(const char *selection, const char *from, clremat_device_info *out);

/* --------------------------------------------------------------- context */

typedef struct clremat_ctx clremat_ctx;
typedef struct clremat_pool clremat_pool;

/** Opens a device context: OpenCL context, profiled in-order compute queue,
 * the device memory pool limited to mem_limit bytes (0: the device's global
 * memory), and kernels.cl built for it. */
int clremat_ctx_create(const char *selection, uint64_t mem_limit, clremat_ctx **out);

/** Releases every OpenCL object of the context; NULL is ignored. */
void clremat_ctx_destroy(clremat_ctx *ctx);

/** Message of the context's last failure ("" if none). */
const char *clremat_ctx_last_error(const clremat_ctx *ctx);

/** The device the context runs on. */
const clremat_device_info *clremat_ctx_device(const clremat_ctx *ctx);

/** The context's device memory pool. */
clremat_pool *clremat_ctx_pool(clremat_ctx *ctx);

/* ------------------------------------------------------------ memory pool */

/** A device buffer handed out by the pool. */
typedef struct clremat_buf {
    void *mem;          /**< the cl_mem (or the test allocator's handle) */
    size_t bytes;       /**< bytes asked for: what counts as live */
    size_t capacity;    /**< bytes held from the allocator: what counts as reserved */
    const char *tag;    /**< what it holds, for reports (static string) */
} clremat_buf;

/** Where the pool gets memory from: OpenCL in a context, anything in tests. */
typedef struct clremat_allocator {
    /** Creates a buffer of bytes; returns NULL and sets *status on failure. */
    void *(*create)(void *user, size_t bytes, int *status);
    /** Releases a buffer made by create. */
    void (*release)(void *user, void *mem);
    void *user;
} clremat_allocator;

/** Counters of a pool. Live bytes are bytes in use by tensors; reserved bytes
 * are bytes held from the allocator (live plus cached free buffers). */
typedef struct clremat_pool_stats {
    uint64_t live_bytes, live_peak;
    uint64_t reserved_bytes, reserved_peak;
    uint64_t limit;
    uint64_t allocs;            /**< pool_alloc calls that succeeded */
    uint64_t created;           /**< buffers created from the allocator */
    uint64_t reused;            /**< allocations served from the free cache */
    uint64_t released;          /**< buffers given back to the allocator */
    uint64_t failed;            /**< allocations refused */
    uint64_t host_bytes, host_peak; /**< host memory holding offloaded tensors (clremat_pool_host_alloc), apart
                                         from the device bytes above */
} clremat_pool_stats;

/** One point of the live-bytes timeline. */
typedef struct clremat_pool_event {
    uint64_t seq;               /**< allocation/free counter */
    int64_t delta;              /**< +bytes allocated, -bytes freed */
    uint64_t live_bytes;        /**< live bytes after the event */
    const char *tag;            /**< the buffer's tag */
} clremat_pool_event;

/** Makes a pool over an allocator. limit 0 means unlimited; max_alloc 0 means
 * no per-buffer maximum. Returns NULL only when out of host memory. */
clremat_pool *clremat_pool_new(const clremat_allocator *allocator, uint64_t limit, uint64_t max_alloc);

/** Frees a pool and releases every buffer it holds; buffers still live are
 * released too. */
void clremat_pool_free_all(clremat_pool *pool);

/** Allocates bytes (>0). Past the limit: CLREMAT_ERR_OUT_OF_MEMORY, with the
 * bytes asked, live and allowed in the pool's last error; above max_alloc:
 * CLREMAT_ERR_TOO_LARGE. The pool stays usable after a failure. */
int clremat_pool_alloc(clremat_pool *pool, size_t bytes, const char *tag, clremat_buf **out);

/** Returns a buffer to the pool's free cache; NULL is ignored. */
void clremat_pool_release(clremat_pool *pool, clremat_buf *buf);

/** Quarantine on: buffers released from now on stop counting as live at
 * once but are not handed out again until quarantine is turned off (they
 * may still be in use by commands running on another queue). Off: they
 * become reusable. Kept for compatibility: the executor uses fences
 * (clremat_pool_release_fenced), which cost no memory. */
void clremat_pool_quarantine(clremat_pool *pool, int on);

/* Fences (overlapped execution on several queues). A buffer released while
 * commands on its queue may still use it carries a fence (an OpenCL event
 * enqueued after those commands, or any handle the fence operations
 * understand) and the queue it was released from. When the pool hands such a
 * buffer to a different queue before the fence has completed, it asks the
 * fence operations to make that queue wait for the fence first. Queues are
 * opaque handles (a cl_command_queue); the pool only compares them. */

/** How the pool tests, waits for and lets go of fences. */
typedef struct clremat_fence_ops {
    /** 1 when the fence has completed, else 0 (an error counts as pending). */
    int (*done)(void *user, void *fence);
    /** Makes queue wait for fence, released from fence_queue, before the
     * commands enqueued on queue from now on; returns a status. */
    int (*wait)(void *user, void *fence, void *fence_queue, void *queue);
    /** Drops the pool's reference to the fence. */
    void (*release)(void *user, void *fence);
    void *user;
} clremat_fence_ops;

/** Installs the fence operations (copied); NULL removes them after letting
 * go of every fence held. Fenced releases need them. */
void clremat_pool_set_fence_ops(clremat_pool *pool, const clremat_fence_ops *ops);

/** Sets the queue that will use the buffers clremat_pool_alloc hands out and
 * that clremat_pool_release_fenced releases from (NULL by default). */
void clremat_pool_set_queue(clremat_pool *pool, void *queue);

/** Like clremat_pool_release, but the buffer's last use completes at fence,
 * on the pool's current queue. The pool owns the fence reference from now
 * on (without fence operations installed it keeps no fence: the reference
 * stays the caller's). Live
 * bytes drop at once; the buffer is reusable at once: the same queue reuses
 * it without waiting (in-order), another queue waits for the fence. Among
 * fitting free buffers of equal capacity the pool prefers one that needs no
 * wait, so which sizes are reused, and thus reserved bytes, do not depend on
 * fences. */
void clremat_pool_release_fenced(clremat_pool *pool, clremat_buf *buf, void *fence);

/** Lets go of every fence held: the queues have synchronized (joined or
 * finished) so nothing released before needs waiting for. */
void clremat_pool_clear_fences(clremat_pool *pool);

/** Fences now held by free buffers (for tests and leak checks). */
size_t clremat_pool_fence_count(const clremat_pool *pool);

/** Hand-outs so far that had to wait for another queue's fence. */
uint64_t clremat_pool_fence_waits(const clremat_pool *pool);

/** Host memory for a tensor offloaded from the device: bytes (> 0) of
 * malloc'ed memory, counted in the stats' host_bytes and host_peak (never
 * in the device's live bytes or limit). CLREMAT_ERR_OUT_OF_MEMORY when the
 * host has none. */
int clremat_pool_host_alloc(clremat_pool *pool, size_t bytes, void **out);

/** Frees host memory from clremat_pool_host_alloc of bytes; NULL is ignored. */
void clremat_pool_host_free(clremat_pool *pool, void *ptr, size_t bytes);

/** Gives cached free buffers back to the allocator (reserved drops to live). */
void clremat_pool_trim(clremat_pool *pool);

/** Current counters. */
clremat_pool_stats clremat_pool_get_stats(const clremat_pool *pool);

/** Resets the peaks (live, reserved, host) to the current values. */
void clremat_pool_reset_peaks(clremat_pool *pool);

/** Sets the limit in bytes (0: unlimited). */
void clremat_pool_set_limit(clremat_pool *pool, uint64_t limit);

/** Fault injection for tests: the k-th allocation from now (1-based) fails
 * with CLREMAT_ERR_OUT_OF_MEMORY as a real device failure would; 0 turns it
 * off. */
void clremat_pool_fail_at(clremat_pool *pool, uint64_t k);

/** Starts (enabled != 0) or stops recording the live-bytes timeline; starting
 * clears what was recorded. */
void clremat_pool_record_timeline(clremat_pool *pool, int enabled);

/** The recorded timeline; valid until the next pool call. */
const clremat_pool_event *clremat_pool_timeline(const clremat_pool *pool, size_t *count);

/** Message of the pool's last failure ("" if none). */
const char *clremat_pool_last_error(const clremat_pool *pool);

/* ------------------------------------------------------------ optimizers */

/** The optimizers. Each parameter tensor p with gradient g is updated once
 * per step t (1-based), elementwise, in float32:
 *  - SGD:   g' = g + wd p;  v = momentum v + g';  p -= lr v
 *  - Adam:  g' = g + wd p (L2);  m = beta1 m + (1 - beta1) g';
 *           v = beta2 v + (1 - beta2) g'^2;
 *           p -= lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *  - AdamW: Adam with g' = g and decoupled decay:
 *           p -= lr ((m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd p)
 * v (SGD) and m, v (Adam, AdamW) start at zero. */
typedef enum clremat_opt_kind {
    CLREMAT_OPT_SGD = 0,    /**< SGD with momentum (heavy ball) */
    CLREMAT_OPT_ADAM,       /**< Adam with bias correction; weight decay added to the gradient (L2) */
    CLREMAT_OPT_ADAMW       /**< Adam with decoupled weight decay */
} clremat_opt_kind;

/** An optimizer and its hyperparameters. clremat_opt_defaults() fills it:
 *
 * | field        | sgd  | adam  | adamw | used by        | valid range    |
 * |--------------|------|-------|-------|----------------|----------------|
 * | lr           | 0.01 | 0.001 | 0.001 | all            | > 0, finite    |
 * | momentum     | 0.9  |   -   |   -   | sgd            | [0, 1)         |
 * | beta1        |  -   | 0.9   | 0.9   | adam, adamw    | [0, 1)         |
 * | beta2        |  -   | 0.999 | 0.999 | adam, adamw    | [0, 1)         |
 * | eps          |  -   | 1e-8  | 1e-8  | adam, adamw    | > 0, finite    |
 * | weight_decay | 0    | 0     | 0.01  | all            | >= 0, finite   |
 *
 * (Fields an optimizer does not use hold the values above all the same:
 * momentum 0.9, beta1 0.9, beta2 0.999, eps 1e-8.) */
typedef struct clremat_opt_config {
    clremat_opt_kind kind;
    float lr;               /**< learning rate */
    float momentum;         /**< SGD momentum */
    float beta1, beta2;     /**< Adam/AdamW moment decay rates */
    float eps;              /**< Adam/AdamW epsilon (added to the root of the second moment) */
    float weight_decay;     /**< SGD and Adam: L2 added to the gradient; AdamW: decoupled */
    int no_fused_update;    /**< 1: gradients kept and the update run after the backward (--no-fused-update);
                                 0 (default): the update runs inside the backward where it applies */
} clremat_opt_config;

/** Bits naming hyperparameters, for clremat_opt_apply() and the training
 * configuration: which values are given rather than left at their default. */
#define CLREMAT_OPT_SET_LR 0x01u
#define CLREMAT_OPT_SET_MOMENTUM 0x02u
#define CLREMAT_OPT_SET_BETA1 0x04u
#define CLREMAT_OPT_SET_BETA2 0x08u
#define CLREMAT_OPT_SET_EPS 0x10u
#define CLREMAT_OPT_SET_WEIGHT_DECAY 0x20u

/** Fills *out with the defaults of an optimizer by name ("sgd", "adam",
 * "adamw"; table above). Returns 0, or -1 for an unknown name or NULL. */
int clremat_opt_defaults(const char *name, clremat_opt_config *out);

/** "sgd", "adam" or "adamw" ("?" for an invalid kind). */
const char *clremat_opt_name(clremat_opt_kind kind);

/** 1 when the optimizer of kind uses the hyperparameter named by the
 * CLREMAT_OPT_SET_* bit, else 0 (momentum: sgd only; beta1, beta2, eps:
 * adam and adamw only; lr, weight_decay: all). */
int clremat_opt_uses(clremat_opt_kind kind, unsigned bit);

/** Copies into *cfg the hyperparameters of values whose CLREMAT_OPT_SET_*
 * bits are in set (cfg->kind stays). Refuses, with
 * CLREMAT_ERR_INVALID_ARGUMENT and a message in clremat_last_error() naming
 * the hyperparameter and the value, one the optimizer does not use ("beta1
 * applies to adam and adamw, not to sgd") or one outside its range ("beta1
 * must be in [0, 1), got 1.5"); *cfg is then unchanged. */
int clremat_opt_apply(clremat_opt_config *cfg, unsigned set, const clremat_opt_config *values);

/** Checks one hyperparameter value against its range (the ranges of
 * clremat_opt_apply(): lr and eps positive and finite; momentum, beta1 and
 * beta2 in [0, 1); weight_decay finite and >= 0). bit is one
 * CLREMAT_OPT_SET_* bit; name is what the message calls the value (NULL:
 * clremat's own name, "lr", "beta1", ...), so that a file format can name
 * its own field ("learning_rate must be a positive finite number, got
 * 0"). Returns CLREMAT_OK, or CLREMAT_ERR_INVALID_ARGUMENT with that
 * message in clremat_last_error(). */
int clremat_opt_check(unsigned bit, float v, const char *name);

/* ------------------------------------------------------------- utilities */

/** Parses a byte count such as "1048576", "512KiB", "1.5GiB", "64MB" (KB/MB/GB
 * are decimal, KiB/MiB/GiB binary). Returns 0 and sets *bytes, or -1. */
int clremat_parse_bytes(const char *text, uint64_t *bytes);

/** Parses a decimal number, all of text: [-]digits[.digits][(e|E)[+|-]digits]
 * (".5" and "5." too). strtod alone also takes leading spaces, hex, "inf"
 * and "nan", which this refuses; out of double's range it gives inf or 0
 * (for the caller's range check). -0 reads as 0. Returns 0 and sets *out,
 * or -1. */
int clremat_parse_decimal(const char *text, double *out);

/** Checks that bytes of host memory can be allocated before a large
 * allocation: refuses (CLREMAT_ERR_OUT_OF_MEMORY, naming what, the bytes
 * needed and the bytes available) when bytes exceed the memory the system
 * reports available (MemAvailable, else physical memory). Returns
 * CLREMAT_OK when it fits or nothing can be learnt. */
int clremat_host_alloc_check(uint64_t bytes, const char *what);

/* ------------------------------------------------------------ GEMM path */

/** Which GEMM implementation a context uses. */
typedef enum clremat_gemm_path {
    CLREMAT_GEMM_AUTO = 0,      /**< $CLREMAT_GEMM, else the cached calibration, else calibrate */
    CLREMAT_GEMM_NATIVE = 1,    /**< kernels.cl GEMM written for CPU-class devices */
    CLREMAT_GEMM_CLBLAST = 2    /**< CLBlast (the path for GPUs) */
} clremat_gemm_path;

/** Forces the context's GEMM path (AUTO: choose again as described above).
 * Set it before creating trainers: their plans include the path's GEMM
 * workspace. Returns CLREMAT_ERR_INVALID_ARGUMENT for an unknown value. */
int clremat_ctx_set_gemm(clremat_ctx *ctx, clremat_gemm_path path);

/** The context's GEMM path, resolving AUTO first (which may calibrate once
 * per device and driver version; the result is cached on disk). */
clremat_gemm_path clremat_ctx_gemm(clremat_ctx *ctx);

/** "auto", "native" or "clblast". */
const char *clremat_gemm_path_name(clremat_gemm_path path);

/** Parses "auto", "native" or "clblast"; CLREMAT_ERR_INVALID_ARGUMENT
 * (with the accepted names in the last error) otherwise. */
int clremat_gemm_path_parse(const char *text, clremat_gemm_path *out);

#ifdef __cplusplus
}
#endif

#endif /* CLREMAT_H */
