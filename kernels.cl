/* kernels.cl: every OpenCL C kernel of clremat (OpenCL C 1.2, float32).
 * Embedded into the library at build time; CLREMAT_KERNELS=path overrides it
 * for kernel development. Kernels are deterministic: no atomics on floats and
 * a fixed reduction order, so recomputation reproduces results bit for bit. */

/* y[i] = a * x[i] + y[i]: the smoke-test kernel. */
__kernel void axpy(const int n, const float a, __global const float *x, __global float *y)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = a * x[i] + y[i];
}

/* ======================================================================
 * H1 core: shared counter-based RNG (bit-identical to host/rng.h)
 * ====================================================================== */

/* The 32-bit finalizer of host/rng.h (clremat_mix32). */
uint clremat_mix32(uint x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Hash of (seed, step, layer, element) to 32 uniform bits; the 64-bit seed
 * comes in as its low and high halves. Same bits as host/rng.h. */
uint clremat_hash(uint seed_lo, uint seed_hi, uint step, uint layer, uint elem)
{
    uint h = clremat_mix32(seed_lo ^ 0x9e3779b9U);
    h = clremat_mix32(h ^ seed_hi);
    h = clremat_mix32(h ^ step);
    h = clremat_mix32(h ^ layer);
    return clremat_mix32(h ^ elem);
}

/* Uniform float in [0, 1) with 24 random bits (exact, as on the host). */
float clremat_uniform(uint h) { return (float)(h >> 8) * (1.0f / 16777216.0f); }

/* Test hook: out[i] = clremat_hash(seed, step, layer, i) for i < n. */
__kernel void clremat_hash_fill(const int n, const uint seed_lo, const uint seed_hi, const uint step,
                                const uint layer, __global uint *out)
{
    int i = get_global_id(0);
    if (i < n)
        out[i] = clremat_hash(seed_lo, seed_hi, step, layer, (uint)i);
}

/* ======================================================================
 * H1 core: GEMM. C = alpha * op(A) op(B) + beta * C, row-major, batched by
 * get_global_id(2). A work-group of 8x8 items computes a 32x32 tile of C,
 * each item a 4x4 block (rows ty + 8i, columns tx + 8j), stepping K by 16
 * through local memory. Accumulation order over K is fixed (deterministic).
 * beta == 0 never reads C.
 * ====================================================================== */
#define GEMM_TM 32
#define GEMM_TN 32
#define GEMM_TK 16
#define GEMM_LX 8
#define GEMM_LY 8

__kernel __attribute__((reqd_work_group_size(GEMM_LX, GEMM_LY, 1)))
void clremat_gemm_tiled(const int tA, const int tB, const int M, const int N, const int K, const float alpha,
                        __global const float *A, const long offA, const long lda, const long sa,
                        __global const float *B, const long offB, const long ldb, const long sb,
                        const float beta, __global float *C, const long offC, const long ldc, const long sc)
{
    __local float As[GEMM_TK][GEMM_TM + 1];
    __local float Bs[GEMM_TK][GEMM_TN + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * GEMM_LX + tx;
    const int n0 = get_group_id(0) * GEMM_TN, m0 = get_group_id(1) * GEMM_TM;
    const long bz = get_global_id(2);
    float acc[4][4];
    A += offA + bz * sa;
    B += offB + bz * sb;
    C += offC + bz * sc;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += GEMM_TK) {
        for (int e = lid; e < GEMM_TK * GEMM_TM; e += GEMM_LX * GEMM_LY) {
            int m, k;
            float v = 0.0f;
            if (tA) { k = e / GEMM_TM; m = e % GEMM_TM; }   /* A stored K x M: contiguous in m */
            else { m = e / GEMM_TK; k = e % GEMM_TK; }      /* A stored M x K: contiguous in k */
            if (m0 + m < M && k0 + k < K)
                v = tA ? A[(long)(k0 + k) * lda + (m0 + m)] : A[(long)(m0 + m) * lda + (k0 + k)];
            As[k][m] = v;
        }
        for (int e = lid; e < GEMM_TK * GEMM_TN; e += GEMM_LX * GEMM_LY) {
            int n, k;
            float v = 0.0f;
            if (tB) { n = e / GEMM_TK; k = e % GEMM_TK; }   /* B stored N x K: contiguous in k */
            else { k = e / GEMM_TN; n = e % GEMM_TN; }      /* B stored K x N: contiguous in n */
            if (n0 + n < N && k0 + k < K)
                v = tB ? B[(long)(n0 + n) * ldb + (k0 + k)] : B[(long)(k0 + k) * ldb + (n0 + n)];
            Bs[k][n] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < GEMM_TK; k++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++)
                a[i] = As[k][ty + GEMM_LY * i];
            for (int j = 0; j < 4; j++)
                b[j] = Bs[k][tx + GEMM_LX * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * b[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty + GEMM_LY * i;
        if (m >= M)
            continue;
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + GEMM_LX * j;
            if (n < N) {
                __global float *c = C + (long)m * ldc + n;
                float r = alpha * acc[i][j];
                if (beta != 0.0f)
                    r += beta * *c;
                *c = r;
            }
        }
    }
}

/* ======================================================================
 * H1 core: elementwise helpers (executor, optimizers, layers)
 * ====================================================================== */

/* dst[i] += src[i]. */
__kernel void clremat_add_inplace(const int n, __global float *dst, __global const float *src)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] += src[i];
}

/* dst[i] = src[i] (acc == 0) or dst[i] += src[i] (acc != 0). */
__kernel void clremat_copy_acc(const int n, const int acc, __global float *dst, __global const float *src)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] = acc ? dst[i] + src[i] : src[i];
}

/* Counts non-finite floats of x[0..n): each work-group (local size 256)
 * strides over the array, reduces its count in local memory and adds it to
 * *count with an integer atomic (exact, so the total is deterministic). */
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void clremat_count_nonfinite(const int n, __global const float *x, __global int *count)
{
    __local int part[256];
    const int lid = get_local_id(0);
    int c = 0;
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        c += isfinite(x[i]) ? 0 : 1;
    part[lid] = c;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 128; s > 0; s >>= 1) {
        if (lid < s)
            part[lid] += part[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && part[0] != 0)
        atomic_add(count, part[0]);
}

/* ======================================================================
 * H1 core: optimizers (backend/optim.c). wd is added to the gradient (L2)
 * for SGD and Adam; AdamW decays the parameter itself (decoupled).
 * ====================================================================== */

/* SGD with momentum: g' = g + wd p; v = momentum v + g'; p -= lr v. */
__kernel void clremat_sgd_step(const int n, const float lr, const float momentum, const float wd,
                               __global float *p, __global const float *g, __global float *v)
{
    int i = get_global_id(0);
    if (i < n) {
        float gi = g[i] + wd * p[i];
        float vi = momentum * v[i] + gi;
        v[i] = vi;
        p[i] = p[i] - lr * vi;
    }
}

/* Adam / AdamW: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * p -= lr (m/bc1) / (sqrt(v/bc2) + eps) [+ lr wd p when decoupled], with
 * g' = g + wd p when not decoupled. bc1 = 1 - b1^t, bc2 = 1 - b2^t. */
__kernel void clremat_adam_step(const int n, const float lr, const float b1, const float b2, const float eps,
                                const float wd, const int decoupled, const float bc1, const float bc2,
                                __global float *p, __global const float *g, __global float *m,
                                __global float *v)
{
    int i = get_global_id(0);
    if (i < n) {
        float pi = p[i];
        float gi = decoupled ? g[i] : g[i] + wd * pi;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        float upd = (mi / bc1) / (sqrt(vi / bc2) + eps);
        m[i] = mi;
        v[i] = vi;
        if (decoupled)
            upd += wd * pi;
        p[i] = pi - lr * upd;
    }
}

/* ======================================================================
 * H1 core: activations, dense bias, dropout, add, reshape kernels.
 * Activation codes are clremat_act of host/graph.h.
 * ====================================================================== */
#define CLREMAT_ACT_NONE 0
#define CLREMAT_ACT_RELU 1
#define CLREMAT_ACT_GELU_TANH 2
#define CLREMAT_ACT_GELU_EXACT 3
#define CLREMAT_ACT_TANH 4
#define CLREMAT_ACT_SIGMOID 5
#define CLREMAT_ACT_SILU 6

#define CLREMAT_SQRT_2_OVER_PI 0.7978845608028654f
#define CLREMAT_GELU_C 0.044715f
#define CLREMAT_INV_SQRT2 0.7071067811865476f
#define CLREMAT_INV_SQRT_2PI 0.3989422804014327f

/* act(x). Every kernel that produces an activation output calls this, so a
 * recomputed activation has the same bits as the forward's. */
float clremat_act_apply(const int act, const float x)
{
    switch (act) {
    case CLREMAT_ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case CLREMAT_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanh(CLREMAT_SQRT_2_OVER_PI * (x + CLREMAT_GELU_C * x * x * x)));
    case CLREMAT_ACT_GELU_EXACT:
        return 0.5f * x * (1.0f + erf(x * CLREMAT_INV_SQRT2));
    case CLREMAT_ACT_TANH:
        return tanh(x);
    case CLREMAT_ACT_SIGMOID:
        return 1.0f / (1.0f + exp(-x));
    case CLREMAT_ACT_SILU:
        return x / (1.0f + exp(-x));
    default:
        return x;
    }
}

/* act'(x), the derivative computed from the activation's input. */
float clremat_act_deriv(const int act, const float x)
{
    switch (act) {
    case CLREMAT_ACT_RELU:
        return x > 0.0f ? 1.0f : 0.0f;
    case CLREMAT_ACT_GELU_TANH: {
        const float u = CLREMAT_SQRT_2_OVER_PI * (x + CLREMAT_GELU_C * x * x * x);
        const float t = tanh(u);
        return 0.5f * (1.0f + t) +
               0.5f * x * (1.0f - t * t) * CLREMAT_SQRT_2_OVER_PI * (1.0f + 3.0f * CLREMAT_GELU_C * x * x);
    }
    case CLREMAT_ACT_GELU_EXACT:
        return 0.5f * (1.0f + erf(x * CLREMAT_INV_SQRT2)) + x * CLREMAT_INV_SQRT_2PI * exp(-0.5f * x * x);
    case CLREMAT_ACT_TANH: {
        const float t = tanh(x);
        return 1.0f - t * t;
    }
    case CLREMAT_ACT_SIGMOID: {
        const float s = 1.0f / (1.0f + exp(-x));
        return s * (1.0f - s);
    }
    case CLREMAT_ACT_SILU: {
        const float s = 1.0f / (1.0f + exp(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    default:
        return 1.0f;
    }
}

/* y[i] = act(x[i]): activation forward and its recomputation. */
__kernel void clremat_act_fwd(const int n, const int act, __global const float *x, __global float *y)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = clremat_act_apply(act, x[i]);
}

/* dx[i] = dy[i] * act'(x[i]) (acc: +=). dx may be dy itself (in place). */
__kernel void clremat_act_bwd(const int n, const int act, const int acc, __global const float *x,
                              __global const float *dy, __global float *dx)
{
    int i = get_global_id(0);
    if (i < n) {
        float g = dy[i] * clremat_act_deriv(act, x[i]);
        dx[i] = acc ? dx[i] + g : g;
    }
}

/* Dense epilogue over rows x units: pre += bias (when use_bias), then
 * out = act(pre) (when act != NONE; out is another buffer then). */
__kernel void clremat_bias_act(const int n, const int units, const int use_bias, const int act,
                               __global const float *bias, __global float *pre, __global float *out)
{
    int i = get_global_id(0);
    if (i < n) {
        float v = pre[i];
        if (use_bias) {
            v += bias[i % units];
            pre[i] = v;
        }
        if (act != CLREMAT_ACT_NONE)
            out[i] = clremat_act_apply(act, v);
    }
}

/* y[c] = sum over r of x[r * cols + c], r in order (deterministic). */
__kernel void clremat_colsum(const int rows, const int cols, __global const float *x, __global float *y)
{
    int c = get_global_id(0);
    if (c < cols) {
        float s = 0.0f;
        for (int r = 0; r < rows; r++)
            s += x[(long)r * cols + c];
        y[c] = s;
    }
}

/* Dropout (forward on x, or backward on dout): y = keep ? x * scale : 0,
 * keep = clremat_uniform(clremat_hash(seed, step, layer, i)) >= rate;
 * acc: y += instead. */
__kernel void clremat_dropout(const int n, const int acc, const float rate, const float scale, const uint seed_lo,
                              const uint seed_hi, const uint step, const uint layer, __global const float *x,
                              __global float *y)
{
    int i = get_global_id(0);
    if (i < n) {
        const int keep = clremat_uniform(clremat_hash(seed_lo, seed_hi, step, layer, (uint)i)) >= rate;
        const float v = keep ? x[i] * scale : 0.0f;
        y[i] = acc ? y[i] + v : v;
    }
}

/* y = a + b with b broadcast inside each sample: a has ea floats per
 * sample, b has eb (eb divides ea; eb == ea is a plain add). */
__kernel void clremat_add_bcast(const int n, const int ea, const int eb, __global const float *a,
                                __global const float *b, __global float *y)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = a[i] + b[(i / ea) * eb + (i % ea) % eb];
}

/* db[s * eb + j] (=, or += when acc) sum over t of dy[s * ea + t * eb + j],
 * t in order: the gradient of a broadcast add operand. n = samples * eb. */
__kernel void clremat_sum_bcast(const int n, const int ea, const int eb, const int acc, __global const float *dy,
                                __global float *db)
{
    int i = get_global_id(0);
    if (i < n) {
        const int s = i / eb, j = i % eb;
        __global const float *p = dy + (long)s * ea + j;
        float sum = 0.0f;
        for (int t = 0; t < ea / eb; t++)
            sum += p[(long)t * eb];
        db[i] = acc ? db[i] + sum : sum;
    }
}
