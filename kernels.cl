/* kernels.cl: every OpenCL C kernel of clremat (OpenCL C 1.2, float32).
 * Embedded into the library at build time; CLREMAT_KERNELS=path overrides it
 * for kernel development. Kernels are deterministic: no atomics on floats and
 * a fixed reduction order, so recomputation reproduces results bit for bit. */

/* Floating-point contraction is off in the whole file where the host
 * passes -DCLREMAT_CONTRACT_OFF (backend/program.c: every platform but
 * Mesa's): every a * b + c then rounds the product, and the products meant
 * to fuse (the inner loops of the GEMM, convolution and attention kernels,
 * the exp polynomial, GELU) say so with CLREMAT_FMA, which is fma(). The
 * bits then follow from the source alone, whatever the compiler: OpenCL's
 * default (FP_CONTRACT ON) lets each compiler fuse as it likes, and
 * NVIDIA's fuses across statements (as clang's -ffp-contract=fast). On an
 * H200 that gave two kernels holding the same arithmetic other bits (a
 * layernorm backward reading x, and one reading act(pre) in the activations
 * mode), so remat modes stopped agreeing with none bit for bit. Mesa's
 * rusticl keeps the default and CLREMAT_FMA(a, b, c) is a * b + c there:
 * with contraction off and fma(), llvmpipe's kernels disagreed with each
 * other (a wide and an eight-wide GELU backward, a GEMM packing through
 * ReLU, NaN signs through the GELU table), while in-statement contraction
 * keeps them bitwise alike, as it did before. */
#ifdef CLREMAT_CONTRACT_OFF
#pragma OPENCL FP_CONTRACT OFF
#define CLREMAT_FMA(a, b, c) fma(a, b, c)
#else
#define CLREMAT_FMA(a, b, c) ((a) * (b) + (c))
#endif

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

/* The 32-bit finalizer of host/rng.h (clremat_mix32), for one uint and,
 * lane by lane, for a uint8 and a uint16 (clremat_mix32x8, clremat_mix32x16):
 * one formula, the same bits. */
#define CLREMAT_DEFINE_MIX32(NAME, T)                                                                       \
    T NAME(T x)                                                                                             \
    {                                                                                                       \
        x ^= x >> 16;                                                                                       \
        x *= 0x7feb352dU;                                                                                   \
        x ^= x >> 15;                                                                                       \
        x *= 0x846ca68bU;                                                                                   \
        x ^= x >> 16;                                                                                       \
        return x;                                                                                           \
    }
CLREMAT_DEFINE_MIX32(clremat_mix32, uint)
CLREMAT_DEFINE_MIX32(clremat_mix32x8, uint8)
CLREMAT_DEFINE_MIX32(clremat_mix32x16, uint16)

/* Hash of (seed, step, layer, element) to 32 uniform bits; the 64-bit seed
 * comes in as its low and high halves. Same bits as host/rng.h. The chain
 * up to the layer (clremat_hash_prefix) does not depend on the element:
 * kernels that draw many elements compute it once. */
uint clremat_hash_prefix(uint seed_lo, uint seed_hi, uint step, uint layer)
{
    uint h = clremat_mix32(seed_lo ^ 0x9e3779b9U);
    h = clremat_mix32(h ^ seed_hi);
    h = clremat_mix32(h ^ step);
    return clremat_mix32(h ^ layer);
}

uint clremat_hash(uint seed_lo, uint seed_hi, uint step, uint layer, uint elem)
{
    return clremat_mix32(clremat_hash_prefix(seed_lo, seed_hi, step, layer) ^ elem);
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
                    acc[i][j] = CLREMAT_FMA(a[i], b[j], acc[i][j]);
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

/* The step kernels (clremat_sgd_step, clremat_adam_step) and the fused
 * updates of the backward (the GEMM's epilogue, clremat_colsum8_upd) all
 * compute through clremat_opt8, defined with the fused-update kernels at the
 * end of this file, so a fused update has the bits of the unfused one. */
void clremat_opt8(const int kind, const float8 hp, const float8 g, float8 *p, float8 *s0, float8 *s1);
void clremat_opt1(const int kind, const float8 hp, const float g, __global float *p, __global float *s0,
                  __global float *s1, const long i);

/* ======================================================================
 * H1 core: activations, dense bias, dropout, add, reshape kernels.
 * Activation codes are clremat_act of base/graph.h.
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
#define CLREMAT_GELU_M2K -1.5957691216057308f /* -2 sqrt(2 / pi) */

/* exp(x) for GELU, written out so that it vectorizes on every device (the
 * builtin exp of float8 runs lane by lane on some CPU devices): Cephes'
 * expf, x = n ln2 + r with n = rint(x log2 e) (ln2 split in two for an exact
 * r), e^r by a degree-6 polynomial (relative error under 2^-23 on
 * [-ln2/2, ln2/2]), 2^n by the exponent bits. x is clamped to [-87, 88]
 * (no overflow, no denormals): GELU takes exp(-2u) only through
 * x / (1 + exp(-2u)), where the clamp changes nothing a float can show but
 * the sign of a zero. NaN propagates through the numerator x. One formula
 * for float and float8 (CLREMAT_DEFINE_EXP(NAME, T, IT)), so the scalar and
 * the eight-wide activation agree. */
#define CLREMAT_DEFINE_EXP(NAME, T, IT)                                                                 \
    T NAME(const T xin)                                                                                 \
    {                                                                                                   \
        const T x = clamp(xin, -87.0f, 88.0f);                                                          \
        const T t = x * 1.44269504088896341f;                                                           \
        const T n = (t + 12582912.0f) - 12582912.0f; /* rint(t): |t| < 2^22, round to nearest even */   \
        const T r = CLREMAT_FMA(-n, (T)(-2.12194440e-4f),                                               \
                                CLREMAT_FMA(-n, (T)(0.693359375f), x));                                 \
        const T z = r * r;                                                                              \
        T p = 1.9875691500e-4f;                                                                         \
        p = CLREMAT_FMA(p, r, (T)(1.3981999507e-3f));                                                   \
        p = CLREMAT_FMA(p, r, (T)(8.3334519073e-3f));                                                   \
        p = CLREMAT_FMA(p, r, (T)(4.1665795894e-2f));                                                   \
        p = CLREMAT_FMA(p, r, (T)(1.6666665459e-1f));                                                   \
        p = CLREMAT_FMA(p, r, (T)(5.0000001201e-1f));                                                   \
        p = CLREMAT_FMA(p, z, r) + 1.0f;                                                                \
        return p * as_##T((convert_##IT(n) + 127) << 23);                                               \
    }
CLREMAT_DEFINE_EXP(clremat_gexp1, float, int)
CLREMAT_DEFINE_EXP(clremat_gexp8, float8, int8)

/* The activations and their derivatives are written once, as macros that
 * define a function for an element type T (float or float8: OpenCL C 1.2
 * has no generics). select(a, b, c) is c ? b : a for float and int
 * conditions as for float8 and int8 ones, and the scalar literals widen to
 * T, so both instances compute the same expressions.
 * CLREMAT_DEFINE_ACT(NAME, T, GEXP): T NAME(act, x) = act(x).
 * CLREMAT_DEFINE_DACT(NAME, T, GEXP): T NAME(act, x) = act'(x), the
 * derivative computed from the activation's input.
 * GELU (tanh form) is computed as x / (1 + exp(-2u)), u = sqrt(2/pi) (x +
 * 0.044715 x^3), which is 0.5 x (1 + tanh(u)) exactly in real arithmetic,
 * with GEXP (CLREMAT_DEFINE_EXP above) for exp: no tanh, every operation
 * vectorizes. CLREMAT_GELU_DEN(GEXP, x) is its denominator 1 + exp(-2u),
 * CLREMAT_GELU_DS(T, x, s) its derivative from s = 1 / that denominator:
 * written once, for the activation, its derivative and the two together
 * (gc_dact_act), which must agree bit for bit. */
#define CLREMAT_GELU_DEN(GEXP, x) (1.0f + GEXP(CLREMAT_GELU_M2K * CLREMAT_FMA(CLREMAT_GELU_C * (x) * (x), (x), (x))))
#define CLREMAT_GELU_DS(T, x, s)                                                                        \
    CLREMAT_FMA(-(CLREMAT_GELU_M2K * (x) * (s) * (1.0f - (s))), CLREMAT_FMA(3.0f * CLREMAT_GELU_C * (x), (x), (T)(1.0f)), (s))
#define CLREMAT_DEFINE_ACT(NAME, T, GEXP)                                                               \
    T NAME(const int act, const T x)                                                                    \
    {                                                                                                   \
        switch (act) {                                                                                  \
        case CLREMAT_ACT_RELU:                                                                          \
            return select((T)0.0f, x, x > 0.0f);                                                        \
        case CLREMAT_ACT_GELU_TANH:                                                                     \
            return x / CLREMAT_GELU_DEN(GEXP, x);                                                       \
        case CLREMAT_ACT_GELU_EXACT:                                                                    \
            return 0.5f * x * (1.0f + erf(x * CLREMAT_INV_SQRT2));                                      \
        case CLREMAT_ACT_TANH:                                                                          \
            return tanh(x);                                                                             \
        case CLREMAT_ACT_SIGMOID:                                                                       \
            return 1.0f / (1.0f + exp(-x));                                                             \
        case CLREMAT_ACT_SILU:                                                                          \
            return x / (1.0f + exp(-x));                                                                \
        default:                                                                                        \
            return x;                                                                                   \
        }                                                                                               \
    }

#define CLREMAT_DEFINE_DACT(NAME, T, GEXP)                                                              \
    T NAME(const int act, const T x)                                                                    \
    {                                                                                                   \
        switch (act) {                                                                                  \
        case CLREMAT_ACT_RELU:                                                                          \
            return select((T)0.0f, (T)1.0f, x > 0.0f);                                                  \
        case CLREMAT_ACT_GELU_TANH: {                                                                   \
            const T s = 1.0f / CLREMAT_GELU_DEN(GEXP, x);                                               \
            return CLREMAT_GELU_DS(T, x, s);                                                            \
        }                                                                                               \
        case CLREMAT_ACT_GELU_EXACT:                                                                    \
            return 0.5f * (1.0f + erf(x * CLREMAT_INV_SQRT2)) + x * CLREMAT_INV_SQRT_2PI * exp(-0.5f * x * x); \
        case CLREMAT_ACT_TANH: {                                                                        \
            const T t = tanh(x);                                                                        \
            return 1.0f - t * t;                                                                        \
        }                                                                                               \
        case CLREMAT_ACT_SIGMOID: {                                                                     \
            const T s = 1.0f / (1.0f + exp(-x));                                                        \
            return s * (1.0f - s);                                                                      \
        }                                                                                               \
        case CLREMAT_ACT_SILU: {                                                                        \
            const T s = 1.0f / (1.0f + exp(-x));                                                        \
            return s * (1.0f + x * (1.0f - s));                                                         \
        }                                                                                               \
        default:                                                                                        \
            return (T)1.0f;                                                                             \
        }                                                                                               \
    }

/* act(x) on one float (the eight-wide clremat_act8 is what the kernels use
 * for activation outputs; see the H6 section). */
CLREMAT_DEFINE_ACT(clremat_act_apply, float, clremat_gexp1)

/* act'(x) on one float (clremat_act_bwd). */
CLREMAT_DEFINE_DACT(clremat_act_deriv, float, clremat_gexp1)

/* Declared here, defined with the eight-wide activations (H6 section). */
float clremat_act1(const int act, const float x);

/* y[i] = act(x[i]) (superseded by clremat_act_fwd8; same bits). */
__kernel void clremat_act_fwd(const int n, const int act, __global const float *x, __global float *y)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = clremat_act1(act, x[i]); /* same bits as the eight-wide kernels */
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
            out[i] = clremat_act1(act, v);
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
 * keep = clremat_uniform(clremat_hash(seed, step, layer, i + off)) >= rate;
 * acc: y += instead. off: the tensor's first element in the step's global
 * batch (the layer call's sample0 times a sample's elements: a micro-batch's
 * offset with accumulation, a rank's shard with data parallelism; else 0). */
__kernel void clremat_dropout(const int n, const int acc, const float rate, const float scale, const uint seed_lo,
                              const uint seed_hi, const uint step, const uint layer, __global const float *x,
                              __global float *y, const uint off)
{
    int i = get_global_id(0);
    if (i < n) {
        /* off: the micro-batch's first element in the step's batch (gradient accumulation) */
        const int keep = clremat_uniform(clremat_hash(seed_lo, seed_hi, step, layer, (uint)i + off)) >= rate;
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

/* ------------------------------------------------------------------------
 * 16-bit storage (mixed precision, issue 16) of activations and their
 * gradients, arithmetic in float32. fmt 0: float32, 1: IEEE binary16
 * (vload_half / vstore_half_rte: core OpenCL 1.2, no cl_khr_fp16 needed;
 * round to nearest even, overflow to infinity), 2: bfloat16 (the high 16
 * bits of a float32, rounded to nearest even from the float's bits, NaN
 * kept a quiet NaN of the same sign). Buffers are passed as bytes. */
inline float clremat_ld16(__global const uchar *p, const int fmt, const long i)
{
    if (fmt == 1)
        return vload_half(i, (__global const half *)p);
    if (fmt == 2)
        return as_float((uint)((__global const ushort *)p)[i] << 16);
    return ((__global const float *)p)[i];
}

inline ushort clremat_bf16_rne(const float v)
{
    const uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
        return (ushort)((u >> 16) | 0x0040u);
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline void clremat_st16(__global uchar *p, const int fmt, const long i, const float v)
{
    if (fmt == 1)
        vstore_half_rte(v, i, (__global half *)p);
    else if (fmt == 2)
        ((__global ushort *)p)[i] = clremat_bf16_rne(v);
    else
        ((__global float *)p)[i] = v;
}

void gc16_st8(__global uchar *p, const int fmt, const long i, const float8 v); /* below, with the GEMM */
float8 gc16_ld8(__global const uchar *p, const int fmt, const long i);

/* P16[base, base + n) = round(p[0, n)) in format fmt (1 or 2): blocks of
 * eight by one vector conversion (gc16_st8), the rest one by one; the same
 * rounding either way (PoCL's scalar vstore_half_rte has no F16C). */
inline void clremat_round_row16(__global uchar *P16, const int fmt, const long base, __global const float *p,
                                const int n)
{
    int j = 0;
    for (; j + 8 <= n; j += 8)
        gc16_st8(P16, fmt, base + j, vload8(0, p + j));
    for (; j < n; j++)
        clremat_st16(P16, fmt, base + j, p[j]);
}

/* ---- layernorm, embedding, attention, losses ---- */
/* Launchers: backend/layer_layernorm.c, layer_embedding.c, layer_attention.c,
 * layer_softmax_ce.c, layer_mse.c. One work-item per row or column; every
 * sum runs in a fixed order. */

/* Class or token id held in a float, clamped to [0, n): NaN and negatives
 * give 0, values >= n give n - 1, fractions are truncated. */
int seq_clamp_id(const float f, const int n)
{
    if (!(f >= 0.0f))
        return 0;
    if (f >= (float)(n - 1))
        return n - 1;
    return (int)f;
}

/* The three layernorm kernels' bodies: LN_X(i), LN_DY(i) load element i
 * of x, dy; LN_Y(i, v), LN_DX(i, v) store it; LN_DXV(i) loads dx
 * (accumulation). The float32 kernels index the buffers directly. Their
 * 16-bit variants (ln_forward16 and the others, at the end of the file,
 * CLREMAT_LN16_*_BODY) load eight elements at a time and must compute the
 * same floats: change both together. */
#define CLREMAT_LN_FORWARD_BODY                                                                                    \
    const int r = get_global_id(0);                                                                                \
    if (r >= rows)                                                                                                 \
        return;                                                                                                    \
    const size_t o = (size_t)r * D;                                                                                \
    float s = 0.0f, v = 0.0f;                                                                                      \
    for (int d = 0; d < D; d++)                                                                                    \
        s += LN_X(o + d);                                                                                          \
    const float mean = s / (float)D;                                                                               \
    for (int d = 0; d < D; d++) {                                                                                  \
        const float t = LN_X(o + d) - mean;                                                                        \
        v += t * t;                                                                                                \
    }                                                                                                              \
    const float rstd = 1.0f / sqrt(v / (float)D + eps);                                                            \
    for (int d = 0; d < D; d++)                                                                                    \
        LN_Y(o + d, (LN_X(o + d) - mean) * rstd * gamma[d] + beta[d]);                                             \
    stats[2 * r] = mean;                                                                                           \
    stats[2 * r + 1] = rstd;

#define CLREMAT_LN_BACKWARD_DX_BODY                                                                                \
    const int r = get_global_id(0);                                                                                \
    if (r >= rows)                                                                                                 \
        return;                                                                                                    \
    const size_t o = (size_t)r * D;                                                                                \
    const float mean = stats[2 * r], rstd = stats[2 * r + 1];                                                      \
    float a = 0.0f, b = 0.0f;                                                                                      \
    for (int d = 0; d < D; d++) {                                                                                  \
        const float gd = gamma[d] * LN_DY(o + d);                                                                  \
        a += gd;                                                                                                   \
        b += gd * (LN_X(o + d) - mean) * rstd;                                                                     \
    }                                                                                                              \
    a /= (float)D;                                                                                                 \
    b /= (float)D;                                                                                                 \
    for (int d = 0; d < D; d++) {                                                                                  \
        const float xhat = (LN_X(o + d) - mean) * rstd;                                                            \
        const float v = rstd * (gamma[d] * LN_DY(o + d) - a - xhat * b);                                           \
        LN_DX(o + d, acc ? LN_DXV(o + d) + v : v);                                                                 \
    }

#define CLREMAT_LN_BACKWARD_PARAMS_BODY                                                                            \
    const int d = get_global_id(0);                                                                                \
    if (d >= D)                                                                                                    \
        return;                                                                                                    \
    float sg = r0 > 0 ? dgamma[d] : 0.0f, sb = r0 > 0 ? dbeta[d] : 0.0f;                                           \
    for (int r = r0; r < rows; r++) {                                                                              \
        const size_t i = (size_t)r * D + d;                                                                        \
        sg += LN_DY(i) * (LN_X(i) - stats[2 * r]) * stats[2 * r + 1];                                              \
        sb += LN_DY(i);                                                                                            \
    }                                                                                                              \
    dgamma[d] = sg;                                                                                                \
    dbeta[d] = sb;

#define LN_X(i) x[i]
#define LN_DY(i) dy[i]
#define LN_Y(i, val) (y[i] = (val))
#define LN_DX(i, val) (dx[i] = (val))
#define LN_DXV(i) dx[i]

/* Layernorm forward, one work-item per row: mean, biased variance (two
 * passes), y = gamma * (x - mean) * rstd + beta; stats[2r] = mean,
 * stats[2r + 1] = rstd. */
__kernel void ln_forward(const int rows, const int D, const float eps, __global const float *x,
                         __global const float *gamma, __global const float *beta, __global float *y,
                         __global float *stats)
{
    CLREMAT_LN_FORWARD_BODY
}

/* Layernorm input gradient, one work-item per row:
 * dx = rstd * (g dy - mean(g dy) - xhat * mean(g dy xhat)); added into dx
 * when acc. */
__kernel void ln_backward_dx(const int rows, const int D, const int acc, __global const float *x,
                             __global const float *stats, __global const float *gamma, __global const float *dy,
                             __global float *dx)
{
    CLREMAT_LN_BACKWARD_DX_BODY
}

/* Layernorm parameter gradients, one work-item per column d, rows in order:
 * dgamma[d] = sum dy * xhat, dbeta[d] = sum dy, over rows [r0, rows): from
 * r0 > 0 on, continuing the sums already in dgamma and dbeta (the launcher
 * splits the rows on a device with a loop budget, loop_budget.h; the same
 * for the other row sums of the normalizations below). */
__kernel void ln_backward_params(const int rows, const int D, __global const float *x, __global const float *stats,
                                 __global const float *dy, __global float *dgamma, __global float *dbeta,
                                 const int r0)
{
    CLREMAT_LN_BACKWARD_PARAMS_BODY
}

#undef LN_X
#undef LN_DY
#undef LN_Y
#undef LN_DX
#undef LN_DXV

/* Embedding forward, one work-item per output element:
 * out[tok, d] = table[id, d] (+ pos[tok % T, d] when positions). */
/* Element i of the embedding's output (emb_forward, emb_forward16). */
inline float emb_value(const int i, const int dim, const int vocab, const int T, const int positions,
                       __global const float *ids, __global const float *table, __global const float *pos)
{
    const int tok = i / dim, d = i % dim;
    float v = table[(size_t)seq_clamp_id(ids[tok], vocab) * dim + d];
    if (positions)
        v += pos[(size_t)(tok % T) * dim + d];
    return v;
}

__kernel void emb_forward(const int ntok, const int dim, const int vocab, const int T, const int positions,
                          __global const float *ids, __global const float *table, __global const float *pos,
                          __global float *out)
{
    const int i = get_global_id(0);
    if (i < ntok * dim)
        out[i] = emb_value(i, dim, vocab, T, positions, ids, table, pos);
}

/* Embedding table gradient, one work-item per vocabulary row: scans the
 * tokens [t0, ntok) in order and adds the rows of dout whose id is this
 * row (the launcher splits the tokens into ranges on a device with a loop
 * budget, loop_budget.h: the later ranges take emb_backward_table_acc,
 * which adds to the same floats in the same order). */
__kernel void emb_backward_table(const int ntok, const int dim, const int vocab, __global const float *ids,
                                 __global const float *dout, __global float *gtable, const int t0)
{
    const int v = get_global_id(0);
    if (v >= vocab)
        return;
    __global float *g = gtable + (size_t)v * dim;
    for (int d = 0; d < dim; d++)
        g[d] = 0.0f;
    for (int tok = t0; tok < ntok; tok++) {
        if (seq_clamp_id(ids[tok], vocab) != v)
            continue;
        __global const float *src = dout + (size_t)tok * dim;
        for (int d = 0; d < dim; d++)
            g[d] += src[d];
    }
}

/* Position table gradient, one work-item per (t, d): sum over the nseq
 * sequences in order. */
__kernel void emb_backward_pos(const int nseq, const int T, const int dim, __global const float *dout,
                               __global float *gpos)
{
    const int i = get_global_id(0);
    if (i >= T * dim)
        return;
    float s = 0.0f;
    for (int b = 0; b < nseq; b++)
        s += dout[(size_t)b * T * dim + i];
    gpos[i] = s;
}

/* C[r, j] += b[j % cols] over n = rows * cols elements. */
__kernel void seq_add_bias(const int n, const int cols, __global float *C, __global const float *b)
{
    const int i = get_global_id(0);
    if (i < n)
        C[i] += b[i % cols];
}

/* Row softmax in place over nrows rows of T scores; row r is query r % T.
 * causal: keys after the query get probability 0. fmt (a literal 0 folds
 * away): the probabilities also rounded into the 16-bit P16. */
inline void attn_softmax_fwd_fmt(const int nrows, const int T, const int causal, __global float *P, const int fmt,
                                 __global uchar *P16)
{
    const int r = get_global_id(0);
    if (r >= nrows)
        return;
    const long base = (long)r * T;
    __global float *p = P + base;
    const int lim = causal ? r % T + 1 : T;
    float m = p[0], s = 0.0f;
    for (int j = 1; j < lim; j++)
        m = fmax(m, p[j]);
    for (int j = 0; j < lim; j++) {
        const float e = exp(p[j] - m);
        p[j] = e;
        s += e;
    }
    const float inv = 1.0f / s;
    for (int j = 0; j < lim; j++)
        p[j] *= inv;
    for (int j = lim; j < T; j++)
        p[j] = 0.0f;
    if (fmt)
        clremat_round_row16(P16, fmt, base, p, T);
}

__kernel void attn_softmax_fwd(const int nrows, const int T, const int causal, __global float *P)
{
    attn_softmax_fwd_fmt(nrows, T, causal, P, 0, (__global uchar *)P);
}

/* attn_softmax_fwd that also rounds the probabilities into P16 (format fmt). */
__kernel void attn_softmax_fwd16(const int nrows, const int T, const int causal, __global float *P, const int fmt,
                                 __global uchar *P16)
{
    attn_softmax_fwd_fmt(nrows, T, causal, P, fmt, P16);
}

/* Keep factor of attention-dropout element e: 1 / (1 - rate) if kept, else 0. */
float attn_keep(const float rate, const uint slo, const uint shi, const uint step, const uint layer, const uint e)
{
    return clremat_uniform(clremat_hash(slo, shi, step, layer, e)) >= rate ? 1.0f / (1.0f - rate) : 0.0f;
}

/* Attention dropout: out[e] = P[e] * keep(e + off); regenerated from the
 * key (off: this call's first element in the step's global batch, from the
 * layer call's sample0: a micro-batch's offset, a data-parallel rank's shard). */
__kernel void attn_dropout_fwd(const int n, const float rate, const uint slo, const uint shi, const uint step,
                               const uint layer, __global const float *P, __global float *out, const uint off)
{
    const int e = get_global_id(0);
    if (e < n)
        out[e] = P[e] * attn_keep(rate, slo, shi, step, layer, (uint)e + off);
}

/* attn_dropout_fwd of 16-bit probabilities P (format fmt) into float32 out. */
__kernel void attn_dropout_fwd16(const int n, const float rate, const uint slo, const uint shi, const uint step,
                                 const uint layer, const int fmt, __global const uchar *P, __global float *out,
                                 const uint off)
{
    const int e = get_global_id(0);
    if (e < n)
        out[e] = clremat_ld16(P, fmt, e) * attn_keep(rate, slo, shi, step, layer, (uint)e + off);
}

/* Attention score gradient in place, one work-item per row: R holds the
 * gradient of the dropped probabilities; dP = R * keep, then
 * R = scale * P * (dP - sum_j P dP). */
inline void attn_softmax_bwd_fmt(const int nrows, const int T, const float rate, const uint slo, const uint shi,
                                 const uint step, const uint layer, const float scale, const int fmt,
                                 __global const uchar *P, __global float *R, const uint off)
{
    const int r = get_global_id(0);
    if (r >= nrows)
        return;
    const long base = (long)r * T;
    float dot = 0.0f;
    for (int j = 0; j < T; j++) {
        float dp = R[base + j];
        if (rate > 0.0f)
            dp *= attn_keep(rate, slo, shi, step, layer, (uint)(base + j) + off);
        R[base + j] = dp;
        dot += clremat_ld16(P, fmt, base + j) * dp;
    }
    for (int j = 0; j < T; j++)
        R[base + j] = scale * clremat_ld16(P, fmt, base + j) * (R[base + j] - dot);
}

__kernel void attn_softmax_bwd(const int nrows, const int T, const float rate, const uint slo, const uint shi,
                               const uint step, const uint layer, const float scale, __global const float *P,
                               __global float *R, const uint off)
{
    attn_softmax_bwd_fmt(nrows, T, rate, slo, shi, step, layer, scale, 0, (__global const uchar *)P, R, off);
}

/* attn_softmax_bwd with 16-bit probabilities P (format fmt). */
__kernel void attn_softmax_bwd16(const int nrows, const int T, const float rate, const uint slo, const uint shi,
                                 const uint step, const uint layer, const float scale, const int fmt,
                                 __global const uchar *P, __global float *R, const uint off)
{
    attn_softmax_bwd_fmt(nrows, T, rate, slo, shi, step, layer, scale, fmt, P, R, off);
}

/* Softmax cross-entropy per row: part[r] = logsumexp - logit[label],
 * part[rows + r] = 1 if the first maximal logit is the label, else 0. */
__kernel void ce_forward_rows(const int rows, const int C, __global const float *logits,
                              __global const float *labels, __global float *part)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *x = logits + (size_t)r * C;
    const int y = seq_clamp_id(labels[r], C);
    float m = x[0], s = 0.0f;
    int am = 0;
    for (int j = 1; j < C; j++)
        if (x[j] > m) {
            m = x[j];
            am = j;
        }
    for (int j = 0; j < C; j++)
        s += exp(x[j] - m);
    part[r] = log(s) + m - x[y];
    part[rows + r] = am == y ? 1.0f : 0.0f;
}

/* Softmax cross-entropy gradient per row: (softmax - onehot) / divisor
 * (the rows of the step's batch: rows, or more for a micro-batch of
 * gradient accumulation), added into din when acc. */
__kernel void ce_backward(const int rows, const int C, const int acc, __global const float *logits,
                          __global const float *labels, __global float *din, const float divisor)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *x = logits + (size_t)r * C;
    __global float *g = din + (size_t)r * C;
    const int y = seq_clamp_id(labels[r], C);
    float m = x[0], s = 0.0f;
    for (int j = 1; j < C; j++)
        m = fmax(m, x[j]);
    for (int j = 0; j < C; j++)
        s += exp(x[j] - m);
    const float inv = 1.0f / s, invn = 1.0f / divisor;
    for (int j = 0; j < C; j++) {
        const float v = (exp(x[j] - m) * inv - (j == y ? 1.0f : 0.0f)) * invn;
        g[j] = acc ? g[j] + v : v;
    }
}

/* MSE partial sums: part[c] = sum over chunk c (in order) of (p - y)^2. */
__kernel void mse_partial(const int n, const int chunk, __global const float *p, __global const float *y,
                          __global float *part)
{
    const int c = get_global_id(0);
    const int lo = c * chunk;
    if (lo >= n)
        return;
    const int hi = min(n, lo + chunk);
    float s = 0.0f;
    for (int i = lo; i < hi; i++) {
        const float d = p[i] - y[i];
        s += d * d;
    }
    part[c] = s;
}

/* MSE gradient: din = 2 (p - y) / divisor (the elements of the step's
 * batch: n, or more for a micro-batch of gradient accumulation), added
 * into din when acc. */
__kernel void mse_backward(const int n, const int acc, __global const float *p, __global const float *y,
                           __global float *din, const float divisor)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float v = 2.0f * (p[i] - y[i]) / divisor;
    din[i] = acc ? din[i] + v : v;
}

/* Loss result, one work-item: out[0] = sum of part[0..n) / divisor; out[1] =
 * sum of part[n..2n) when has_correct, else 0. Sums in index order, over
 * [i0, i1) a launch: from i0 > 0 on continuing the sums already in out, and
 * dividing only at i1 = n (the launcher splits the range on a device with a
 * loop budget, loop_budget.h). */
__kernel void seq_loss_finish(const int n, const int has_correct, const float divisor, __global const float *part,
                              __global float *out, const int i0, const int i1)
{
    if (get_global_id(0) != 0)
        return;
    float s = i0 > 0 ? out[0] : 0.0f, k = i0 > 0 ? out[1] : 0.0f;
    for (int i = i0; i < i1; i++)
        s += part[i];
    if (has_correct)
        for (int i = i0; i < i1; i++)
            k += part[n + i];
    out[0] = i1 < n ? s : s / divisor;
    out[1] = k;
}

/* ======================================================================
 * H6 perf: activations eight elements at a time. Every kernel that
 * produces an activation output (clremat_act_fwd8, clremat_bias_act8, the
 * GEMM epilogue, and the scalar clremat_act_fwd / clremat_bias_act kept for
 * compatibility) computes it with clremat_act8, so forward, fused forward
 * and recomputation give the same bits. The switch is outside the vector
 * arithmetic, so the math builtins run on float8.
 * ====================================================================== */
/* act(x) on eight elements (CLREMAT_DEFINE_ACT above). */
CLREMAT_DEFINE_ACT(clremat_act8, float8, clremat_gexp8)

/* act'(x) on eight elements (the backward; no bit-identity constraint). */
CLREMAT_DEFINE_DACT(clremat_dact8, float8, clremat_gexp8)

/* act of one float, computed by clremat_act8 (lane 0), so it matches the
 * eight-wide kernels bit for bit. */
float clremat_act1(const int act, const float x) { return clremat_act8(act, (float8)(x)).s0; }

/* act'(x) of one float, by clremat_dact8 (lane 0): the eight-wide kernels' bits. */
float clremat_dact1(const int act, const float x) { return clremat_dact8(act, (float8)(x)).s0; }

/* Loads elements [i0, i0+8) of p (zeros past n). */
float8 clremat_load8(__global const float *p, const int i0, const int n)
{
    float t[8];
    if (i0 + 8 <= n)
        return vload8(0, p + i0);
    for (int j = 0; j < 8; j++)
        t[j] = i0 + j < n ? p[i0 + j] : 0.0f;
    return vload8(0, t);
}

/* Stores elements [i0, i0+8) of v into p (none past n). */
void clremat_store8(__global float *p, const int i0, const int n, const float8 v)
{
    float t[8];
    if (i0 + 8 <= n) {
        vstore8(v, 0, p + i0);
        return;
    }
    vstore8(v, 0, t);
    for (int j = 0; j < 8 && i0 + j < n; j++)
        p[i0 + j] = t[j];
}

/* y = act(x), eight elements per work-item: launch ceil(n / 8) items. */
__kernel void clremat_act_fwd8(const int n, const int act, __global const float *x, __global float *y)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n)
        clremat_store8(y, i0, n, clremat_act8(act, clremat_load8(x, i0, n)));
}

/* dx = dy * act'(x) (acc: +=), eight per item; dx may be dy (in place). */
__kernel void clremat_act_bwd8(const int n, const int act, const int acc, __global const float *x,
                               __global const float *dy, __global float *dx)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n) {
        float8 g = clremat_load8(dy, i0, n) * clremat_dact8(act, clremat_load8(x, i0, n));
        if (acc)
            g = clremat_load8(dx, i0, n) + g;
        clremat_store8(dx, i0, n, g);
    }
}

/* Dense epilogue as a pass (CLBlast path), eight per item: pre += bias
 * (use_bias), out = act(pre) (act != NONE). */
__kernel void clremat_bias_act8(const int n, const int units, const int use_bias, const int act,
                                __global const float *bias, __global float *pre, __global float *out)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n) {
        float8 v = clremat_load8(pre, i0, n);
        if (use_bias) {
            float t[8];
            for (int j = 0; j < 8; j++)
                t[j] = bias[(i0 + j) % units];
            v = v + vload8(0, t);
            clremat_store8(pre, i0, n, v);
        }
        if (act != CLREMAT_ACT_NONE)
            clremat_store8(out, i0, n, clremat_act8(act, v));
    }
}

/* ======================================================================
 * H6 perf: GEMM for CPU-class devices (the "native" GEMM path).
 * One work-item per work-group computes a block of C of at most GC_MC x
 * GC_NC (the host picks it, see clremat_gemm_cpu). K is
 * walked in blocks of GC_KC: the A block (GC_MC x GC_KC) and the B block
 * (GC_KC x GC_NC) are packed into local memory (which is cache on a CPU
 * device) as micro-panels -- A as GC_MR rows interleaved per k, B as GC_NR
 * columns contiguous per k -- whatever the transposes, zero-padded at the
 * edges. A GC_MR x GC_NR register tile (6 x 16 floats, twelve float8
 * accumulators) then runs over each pair of micro-panels. Each k-block's
 * partial product is added to C in a fixed order (block 0 writes
 * alpha*acc + beta*C, later blocks add alpha*acc), so results do not
 * depend on scheduling. The last k-block can apply the dense epilogue:
 * pre = v + bias[n]; out = act(pre) computed on that same float, so a
 * recomputation act(pre) reproduces out bit for bit.
 * ====================================================================== */
#ifndef GC_MR
#define GC_MR 6
#endif
#ifndef GC_NR
#define GC_NR 16
#endif
/* A register tile row is two vectors of GC_VW floats: float8 for the 6 x 16
 * tile (AVX2-class devices), float16 for 12 x 32 (AVX-512-class devices,
 * whose 32 vector registers hold its 24 accumulators); backend/program.c
 * picks the tile from the device's native float vector width. */
#if GC_NR == 32
#define GC_VW 16
typedef float16 gc_vec;
#define gc_vload vload16
#define gc_vstore vstore16
#else
#define GC_VW 8
typedef float8 gc_vec;
#define gc_vload vload8
#define gc_vstore vstore8
#endif

/* act of a gc_vec, through clremat_act8 on each eight-lane part (the bits
 * of every other activation kernel). */
gc_vec gc_act(const int act, const gc_vec v)
{
#if GC_VW == 16
    return (float16)(clremat_act8(act, v.lo), clremat_act8(act, v.hi));
#else
    return clremat_act8(act, v);
#endif
}

/* clremat_opt8 on a gc_vec, eight lanes at a time (the same bits). */
void gc_opt(const int kind, const float8 hp, const gc_vec g, gc_vec *p, gc_vec *s0, gc_vec *s1)
{
#if GC_VW == 16
    float8 pl = (*p).lo, ph = (*p).hi, al = (*s0).lo, ah = (*s0).hi, bl = (*s1).lo, bh = (*s1).hi;
    clremat_opt8(kind, hp, g.lo, &pl, &al, &bl);
    clremat_opt8(kind, hp, g.hi, &ph, &ah, &bh);
    *p = (float16)(pl, ph);
    *s0 = (float16)(al, ah);
    *s1 = (float16)(bl, bh);
#else
    clremat_opt8(kind, hp, g, p, s0, s1);
#endif
}
#ifndef GC_MC
#define GC_MC 288
#endif
#ifndef GC_NC
#define GC_NC 256
#endif
#ifndef GC_KC
#define GC_KC 256
#endif

/* act on GC_VW lanes for gc_pack_a_act_rows: where GC_VW is 16 and act is
 * GELU (tanh form) or ReLU, one sixteen-wide instance of the same formulas
 * (CLREMAT_DEFINE_ACT and CLREMAT_DEFINE_EXP on float16: the same
 * elementwise operations on every lane as clremat_act8, so the same bits,
 * in half the instructions of two eight-wide calls on a 16-lane device);
 * else, and for the activations that call math builtins (whose
 * sixteen-wide versions may round differently), gc_act. */
#if GC_VW == 16
CLREMAT_DEFINE_EXP(gc_gexp16, float16, int16)
CLREMAT_DEFINE_ACT(gc_act16, float16, gc_gexp16)
#endif
gc_vec gc_act_pack(const int act, const gc_vec v)
{
#if GC_VW == 16
    if (act == CLREMAT_ACT_GELU_TANH || act == CLREMAT_ACT_RELU)
        return gc_act16(act, v);
#endif
    return gc_act(act, v);
}

/* The wide elementwise kernels (clremat_act_fwdw, clremat_act_bwdw,
 * clremat_cvt16w, clremat_act_bwd16w): CLREMAT_EW elements per work-item,
 * 16 where GC_VW is 16 (one float16 per array on a 16-lane device: the
 * eight-wide kernels left half of each vector register unused, and GELU is
 * bound by its arithmetic), else 8; the host launches ceil(n / CLREMAT_EW)
 * (clremat_ew, kernel_run.h). A whole block of sixteen runs GELU (tanh
 * form) and ReLU as one sixteen-wide instance of the same formulas
 * (CLREMAT_ACT_WIDE: no math builtins, so every lane gets clremat_act8's
 * and clremat_dact8's bits); anything else, and the last partial block, as
 * two eight-wide blocks of the eight-wide kernels' code. */
#if GC_VW == 16
#define CLREMAT_EW 16
CLREMAT_DEFINE_DACT(gc_dact16, float16, gc_gexp16)
#else
#define CLREMAT_EW 8
#endif
#define CLREMAT_ACT_WIDE(act) ((act) == CLREMAT_ACT_GELU_TANH || (act) == CLREMAT_ACT_RELU)

/* act'(x) on a gc_vec with clremat_act_bwdw's bits: GELU (tanh form) and
 * ReLU sixteen wide where GC_VW is 16, else clremat_dact8 on each
 * eight-lane part (every lane's bits are the same either way). */
gc_vec gc_dact(const int act, const gc_vec x)
{
#if GC_VW == 16
    if (CLREMAT_ACT_WIDE(act))
        return gc_dact16(act, x);
    return (float16)(clremat_dact8(act, x.lo), clremat_dact8(act, x.hi));
#else
    return clremat_dact8(act, x);
#endif
}

/* act'(x), returned, and act(x), in *a, of a gc_vec: gc_dact's and
 * gc_act_pack's bits. GELU (tanh form) sixteen wide computes its
 * denominator once for both (one exp instead of two); anything else
 * calls the two. */
gc_vec gc_dact_act(const int act, const gc_vec x, gc_vec *a)
{
#if GC_VW == 16
    if (act == CLREMAT_ACT_GELU_TANH) {
        const float16 d = CLREMAT_GELU_DEN(gc_gexp16, x), s = 1.0f / d;
        *a = x / d;
        return CLREMAT_GELU_DS(float16, x, s);
    }
#endif
    *a = gc_act_pack(act, x);
    return gc_dact(act, x);
}

/* y = act(x): clremat_act_fwd8's floats, CLREMAT_EW per work-item. */
__kernel void clremat_act_fwdw(const int n, const int act, __global const float *x, __global float *y)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n && CLREMAT_ACT_WIDE(act)) {
        vstore16(gc_act16(act, vload16(0, x + i0)), 0, y + i0);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8)
        if (i0 + h < n)
            clremat_store8(y, i0 + h, n, clremat_act8(act, clremat_load8(x, i0 + h, n)));
}

/* dx = dy * act'(x) (acc: +=): clremat_act_bwd8's floats, CLREMAT_EW per
 * work-item; dx may be dy (in place). */
__kernel void clremat_act_bwdw(const int n, const int act, const int acc, __global const float *x,
                               __global const float *dy, __global float *dx)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n && CLREMAT_ACT_WIDE(act)) {
        float16 g = vload16(0, dy + i0) * gc_dact16(act, vload16(0, x + i0));
        if (acc)
            g = vload16(0, dx + i0) + g;
        vstore16(g, 0, dx + i0);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8) {
        const int j = i0 + h;
        if (j < n) {
            float8 g = clremat_load8(dy, j, n) * clremat_dact8(act, clremat_load8(x, j, n));
            if (acc)
                g = clremat_load8(dx, j, n) + g;
            clremat_store8(dx, j, n, g);
        }
    }
}

/* ------------------------------------------------------------------------
 * Mixed precision fused into the native GEMM (issue 16): operands stored in
 * 16 bits are widened while packing (exactly: binary16 by vload_half,
 * bfloat16 as its bits << 16), and a 16-bit C is rounded in the epilogue
 * (binary16: vstore_half_rte, round to nearest even, overflow to
 * infinity; bfloat16: round to nearest even from the float's bits, NaN
 * kept a quiet NaN of the same sign), the arithmetic of clremat_cvt16 on
 * the float the float32 GEMM would have stored. fmt as clremat_cvt16: 1
 * binary16, 2 bfloat16. The packed panels hold the same floats as
 * gc_pack_a / gc_pack_b would after a conversion pass. */
float gc16_ld(__global const uchar *p, const int fmt, const long i)
{
    if (fmt == 1)
        return vload_half(0, (__global const half *)p + i);
    return as_float((uint)((__global const ushort *)p)[i] << 16);
}

/* gc16_ld8, gc16_ld4, gc16_ld2: N elements from i widened by one vector
 * load (binary16 by vload_halfN, bfloat16 by the shift). */
#define GC16_DEFINE_LD(N)                                                                                  \
    float##N gc16_ld##N(__global const uchar *p, const int fmt, const long i)                              \
    {                                                                                                      \
        if (fmt == 1)                                                                                      \
            return vload_half##N(0, (__global const half *)p + i);                                         \
        return as_float##N(convert_uint##N(vload##N(0, (__global const ushort *)p + i)) << 16);            \
    }
GC16_DEFINE_LD(8)
GC16_DEFINE_LD(4)
GC16_DEFINE_LD(2)

/* bfloat16 bits of eight floats, rounded to nearest even (NaN: quiet, sign kept). */
ushort8 gc16_bf16x8(const float8 v)
{
    const uint8 u = as_uint8(v);
    const uint8 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x0040u;
    return convert_ushort8(select(r, q, (u & 0x7fffffffu) > 0x7f800000u));
}

/* Stores round(v) into p[i, i+8) of format fmt. bfloat16 where the
 * address is 16-byte aligned (the elementwise kernels' blocks of eight on
 * an aligned buffer; GEMM rows at a stride and column of multiples of 8):
 * one ushort8 store, as PoCL lowers vstore8 of ushort
 * (2-byte alignment) to eight 16-bit stores (a GELU forward in bfloat16
 * took 1.7-1.9 times the float32 one, bench/stream_bench); else vstore8. */
void gc16_st8(__global uchar *p, const int fmt, const long i, const float8 v)
{
    if (fmt == 1) {
        vstore_half8_rte(v, 0, (__global half *)p + i);
    } else {
        __global ushort *q = (__global ushort *)p + i;
        if (((ulong)q & 15) == 0)
            *(__global ushort8 *)q = gc16_bf16x8(v);
        else
            vstore8(gc16_bf16x8(v), 0, q);
    }
}

void gc16_st(__global uchar *p, const int fmt, const long i, const float v)
{
    if (fmt == 1)
        vstore_half_rte(v, 0, (__global half *)p + i);
    else
        ((__global ushort *)p)[i] = gc16_bf16x8((float8)(v)).s0;
}

/* The 16-bit epilogue of eight elements of C at ci (w of them valid,
 * 1..8): acc: v = old + v (the order of clremat_cvt16's accumulation);
 * C16 = round(v); with act, out16 = round(act(C16's value)), as
 * clremat_cvt16 writes an activation output from its rounded source. */
void gc16_epi8(__global uchar *C16, __global uchar *out16, const int fmt, const int acc, const int act,
               const long ci, const int w, float8 v)
{
    float t[8];
    if (w == 8) {
        if (acc)
            v = gc16_ld8(C16, fmt, ci) + v;
        gc16_st8(C16, fmt, ci, v);
        if (act != CLREMAT_ACT_NONE)
            gc16_st8(out16, fmt, ci, clremat_act8(act, gc16_ld8(C16, fmt, ci)));
        return;
    }
    vstore8(v, 0, t);
    for (int j = 0; j < w; j++) {
        float x = t[j];
        if (acc)
            x = gc16_ld(C16, fmt, ci + j) + x;
        gc16_st(C16, fmt, ci + j, x);
        if (act != CLREMAT_ACT_NONE)
            gc16_st(out16, fmt, ci + j, clremat_act1(act, gc16_ld(C16, fmt, ci + j)));
    }
}

/* gc16_epi8 over the two gc_vec of a whole register-tile row at ci, a
 * gc_vec at a time: the activation runs once per gc_vec through
 * gc_act_pack (sixteen lanes at once for GELU and ReLU where GC_VW is 16;
 * the bits of clremat_act8), which keeps the kernel's unrolled tile loop
 * small. The same floats as gc16_epi8. */
gc_vec gc16_ldv(__global const uchar *p, const int fmt, const long i)
{
#if GC_VW == 16
    return (float16)(gc16_ld8(p, fmt, i), gc16_ld8(p, fmt, i + 8));
#else
    return gc16_ld8(p, fmt, i);
#endif
}

void gc16_stv(__global uchar *p, const int fmt, const long i, const gc_vec v)
{
#if GC_VW == 16
    gc16_st8(p, fmt, i, v.lo);
    gc16_st8(p, fmt, i + 8, v.hi);
#else
    gc16_st8(p, fmt, i, v);
#endif
}

void gc16_epi(__global uchar *C16, __global uchar *out16, const int fmt, const int acc, const int act,
              const long ci, gc_vec v0, gc_vec v1)
{
    if (acc) {
        v0 = gc16_ldv(C16, fmt, ci) + v0;
        v1 = gc16_ldv(C16, fmt, ci + GC_VW) + v1;
    }
    gc16_stv(C16, fmt, ci, v0);
    gc16_stv(C16, fmt, ci + GC_VW, v1);
    if (act != CLREMAT_ACT_NONE) {
        gc16_stv(out16, fmt, ci, gc_act_pack(act, gc16_ldv(C16, fmt, ci)));
        gc16_stv(out16, fmt, ci + GC_VW, gc_act_pack(act, gc16_ldv(C16, fmt, ci + GC_VW)));
    }
}

/* Four rows of eight (a, b, c, d) transposed by two rounds of two-source
 * shuffles (pairs of rows interleaved, then pairs of pairs): col[j] holds
 * column j of the four rows in lanes 0-3 and column j + 4 in lanes 4-7. */
void gc_tr4x8(const float8 a, const float8 b, const float8 c, const float8 d, float8 *col)
{
    const uint8 lo = (uint8)(0, 8, 1, 9, 4, 12, 5, 13), hi = (uint8)(2, 10, 3, 11, 6, 14, 7, 15);
    const uint8 ev = (uint8)(0, 1, 8, 9, 4, 5, 12, 13), od = (uint8)(2, 3, 10, 11, 6, 7, 14, 15);
    const float8 t0 = shuffle2(a, b, lo), t1 = shuffle2(a, b, hi), t2 = shuffle2(c, d, lo), t3 = shuffle2(c, d, hi);
    col[0] = shuffle2(t0, t2, ev);
    col[1] = shuffle2(t0, t2, od);
    col[2] = shuffle2(t1, t3, ev);
    col[3] = shuffle2(t1, t3, od);
}

/* Eight k of the GC_MR rows of a micro-panel (r[i]: row i's eight
 * values) stored transposed into the packed panel at d (k-major, GC_MR
 * floats a k): vector stores of a column each, for gc_pack_a and
 * gc_pack_a16's whole panels of an untransposed A. The 12-row panel
 * builds its columns with two-source shuffles (gc_tr4x8) rather than lane
 * by lane; the 6-row one keeps lane inserts. */
#if GC_MR != 12 && GC_MR != 6
#error "GC_MR is 6 or 12 (backend/program.c)"
#endif
void gc_store_a8_t(__local float *d, const float8 *r)
{
#if GC_MR == 6
#define GC_STORE_A_COL(j)                                                                                         \
    vstore4((float4)(r[0].s##j, r[1].s##j, r[2].s##j, r[3].s##j), 0, d + j * GC_MR);                             \
    vstore2((float2)(r[4].s##j, r[5].s##j), 0, d + j * GC_MR + 4)
    GC_STORE_A_COL(0);
    GC_STORE_A_COL(1);
    GC_STORE_A_COL(2);
    GC_STORE_A_COL(3);
    GC_STORE_A_COL(4);
    GC_STORE_A_COL(5);
    GC_STORE_A_COL(6);
    GC_STORE_A_COL(7);
#undef GC_STORE_A_COL
#else
    /* three 4 x 8 transposes (rows 0-3, 4-7, 8-11); columns j and j + 4 of
     * rows 0-7 are then the halves of two of them */
    float8 p[4], q[4], w[4];
    gc_tr4x8(r[0], r[1], r[2], r[3], p);
    gc_tr4x8(r[4], r[5], r[6], r[7], q);
    gc_tr4x8(r[8], r[9], r[10], r[11], w);
    for (int j = 0; j < 4; j++) {
        vstore8(shuffle2(p[j], q[j], (uint8)(0, 1, 2, 3, 8, 9, 10, 11)), 0, d + j * GC_MR);
        vstore8(shuffle2(p[j], q[j], (uint8)(4, 5, 6, 7, 12, 13, 14, 15)), 0, d + (j + 4) * GC_MR);
        vstore4(w[j].lo, 0, d + j * GC_MR + 8);
        vstore4(w[j].hi, 0, d + (j + 4) * GC_MR + 8);
    }
#endif
}

/* gc_pack_a_rows_t of a 16-bit A: the whole micro-panels of op(A) = A^T
 * (np of them), eight k at a time across the panels, so each row of A is
 * read as one contiguous stream (panel by panel with k inside, a row of A
 * would be revisited once per panel at a stride of lda). */
void gc_pack_a16_rows_t(__local float *Ap, __global const uchar *A, const int fmt, const long lda, const int m0,
                        const int np, const int k0, const int kc)
{
    const int k8 = kc / 8 * 8;
    for (int kb = 0; kb < kc; kb += 8)
        for (int p = 0; p < np; p++)
            for (int k = kb; k < (kb < k8 ? kb + 8 : kc); k++) {
                const long s = (long)(k0 + k) * lda + m0 + p * GC_MR;
                __local float *d = Ap + (p * GC_KC + k) * GC_MR;
#if GC_MR == 12
                vstore8(gc16_ld8(A, fmt, s), 0, d);
                vstore4(gc16_ld4(A, fmt, s + 8), 0, d + 8);
#else
                vstore4(gc16_ld4(A, fmt, s), 0, d);
                vstore2(gc16_ld2(A, fmt, s + 4), 0, d + 4); /* a vector load: PoCL's scalar vload_half has no F16C */
#endif
            }
}

/* gc_pack_a of a 16-bit A (no activation: the mixed path never packs one
 * through a function). The same layout and padding as gc_pack_a. */
void gc_pack_a16(__local float *Ap, __global const uchar *A, const int fmt, const int tA, const long lda,
                 const int M, const int m0, const int mc, const int k0, const int kc)
{
    const int np = (mc + GC_MR - 1) / GC_MR;
    int p0 = 0; /* whole panels of op(A) = A^T, packed first as streams */
    if (tA) {
        p0 = max(0, min(mc, M - m0)) / GC_MR;
        gc_pack_a16_rows_t(Ap, A, fmt, lda, m0, p0, k0, kc);
    }
    for (int p = p0; p < np; p++) {
        __local float *dst = Ap + p * GC_KC * GC_MR;
        const int mb = m0 + p * GC_MR, h = max(0, min(GC_MR, min(M - mb, mc - p * GC_MR)));
        for (int r = h; r < GC_MR; r++)
            for (int k = 0; k < kc; k++)
                dst[k * GC_MR + r] = 0.0f;
        if (!tA && h == GC_MR) { /* a whole panel of rows: eight k of each of the GC_MR rows
                                  * widened as float8 and stored transposed, as gc_pack_a */
            const long s = (long)mb * lda + k0;
            int k = 0;
            for (; k + 8 <= kc; k += 8) {
                float8 r[GC_MR];
#pragma unroll
                for (int i = 0; i < GC_MR; i++)
                    r[i] = gc16_ld8(A, fmt, s + (long)i * lda + k);
                gc_store_a8_t(dst + k * GC_MR, r);
            }
            for (; k < kc; k++)
                for (int i = 0; i < GC_MR; i++)
                    dst[k * GC_MR + i] = gc16_ld(A, fmt, s + (long)i * lda + k);
            continue;
        }
        if (tA) { /* row k of A holds the panel's h values contiguously */
            for (int k = 0; k < kc; k++) {
                const long s = (long)(k0 + k) * lda + mb;
                for (int r = 0; r < h; r++)
                    dst[k * GC_MR + r] = gc16_ld(A, fmt, s + r);
            }
        } else { /* row m of A holds the k contiguously: eight at a time */
            for (int r = 0; r < h; r++) {
                const long s = (long)(mb + r) * lda + k0;
                int k = 0;
                for (; k + 8 <= kc; k += 8) {
                    float t[8];
                    vstore8(gc16_ld8(A, fmt, s + k), 0, t);
                    for (int j = 0; j < 8; j++)
                        dst[(k + j) * GC_MR + r] = t[j];
                }
                for (; k < kc; k++)
                    dst[k * GC_MR + r] = gc16_ld(A, fmt, s + k);
            }
        }
    }
}

/* Eight rows r0..r7 of B^T (eight k each) stored transposed into a packed
 * B panel at d: row k of the panel (GC_NR floats apart) gets lane k of
 * each. gc_pack_b and gc_pack_b16's 8 x 8 blocks. */
void gc_store_b8x8_t(__local float *d, const float8 r0, const float8 r1, const float8 r2, const float8 r3,
                     const float8 r4, const float8 r5, const float8 r6, const float8 r7)
{
    vstore8((float8)(r0.s0, r1.s0, r2.s0, r3.s0, r4.s0, r5.s0, r6.s0, r7.s0), 0, d);
    vstore8((float8)(r0.s1, r1.s1, r2.s1, r3.s1, r4.s1, r5.s1, r6.s1, r7.s1), 0, d + GC_NR);
    vstore8((float8)(r0.s2, r1.s2, r2.s2, r3.s2, r4.s2, r5.s2, r6.s2, r7.s2), 0, d + 2 * GC_NR);
    vstore8((float8)(r0.s3, r1.s3, r2.s3, r3.s3, r4.s3, r5.s3, r6.s3, r7.s3), 0, d + 3 * GC_NR);
    vstore8((float8)(r0.s4, r1.s4, r2.s4, r3.s4, r4.s4, r5.s4, r6.s4, r7.s4), 0, d + 4 * GC_NR);
    vstore8((float8)(r0.s5, r1.s5, r2.s5, r3.s5, r4.s5, r5.s5, r6.s5, r7.s5), 0, d + 5 * GC_NR);
    vstore8((float8)(r0.s6, r1.s6, r2.s6, r3.s6, r4.s6, r5.s6, r6.s6, r7.s6), 0, d + 6 * GC_NR);
    vstore8((float8)(r0.s7, r1.s7, r2.s7, r3.s7, r4.s7, r5.s7, r6.s7, r7.s7), 0, d + 7 * GC_NR);
}

/* gc_pack_b of a 16-bit B: the same layout and padding as gc_pack_b, and
 * its order of reads. B (:n): k outer, each k one contiguous row segment
 * across the whole panels (streams); B^T (:t): eight rows of B^T widened as
 * float8 and stored transposed, eight k at a time. The rest (partial
 * panels, the last k) one element at a time. */
void gc_pack_b16(__local float *Bp, __global const uchar *B, const int fmt, const int tB, const long ldb,
                 const int N, const int n0, const int nc, const int k0, const int kc)
{
    const int np = (nc + GC_NR - 1) / GC_NR;
    int nfull = 0;
    while (nfull < np && n0 + (nfull + 1) * GC_NR <= N && (nfull + 1) * GC_NR <= nc)
        nfull++;
    if (!tB)
        for (int k = 0; k < kc; k++) {
            const long s = (long)(k0 + k) * ldb + n0;
            for (int p = 0; p < nfull; p++)
                for (int j = 0; j < GC_NR; j += 8)
                    vstore8(gc16_ld8(B, fmt, s + p * GC_NR + j), 0, Bp + (p * GC_KC + k) * GC_NR + j);
        }
    for (int p = 0; p < np; p++) {
        __local float *dst = Bp + p * GC_KC * GC_NR;
        const int nb = n0 + p * GC_NR, w = max(0, min(GC_NR, min(N - nb, nc - p * GC_NR)));
        int k = 0;
        if (p < nfull && !tB)
            continue;
        if (p < nfull) /* B^T: 8 x 8 blocks */
            for (; k + 8 <= kc; k += 8)
                for (int jj = 0; jj < GC_NR; jj += 8) {
                    const long s = (long)(nb + jj) * ldb + k0 + k;
                    const float8 r0 = gc16_ld8(B, fmt, s), r1 = gc16_ld8(B, fmt, s + ldb),
                                 r2 = gc16_ld8(B, fmt, s + 2 * ldb), r3 = gc16_ld8(B, fmt, s + 3 * ldb),
                                 r4 = gc16_ld8(B, fmt, s + 4 * ldb), r5 = gc16_ld8(B, fmt, s + 5 * ldb),
                                 r6 = gc16_ld8(B, fmt, s + 6 * ldb), r7 = gc16_ld8(B, fmt, s + 7 * ldb);
                    gc_store_b8x8_t(dst + k * GC_NR + jj, r0, r1, r2, r3, r4, r5, r6, r7);
                }
        for (; k < kc; k++)
            for (int j = 0; j < GC_NR; j++)
                dst[k * GC_NR + j] = j >= w ? 0.0f
                                            : gc16_ld(B, fmt, tB ? (long)(nb + j) * ldb + k0 + k
                                                                 : (long)(k0 + k) * ldb + nb + j);
    }
}


/* gc_pack_a for op(A) = act(A^T) (a dense layer's dW = act(pre)^T dZ in
 * the activations mode): row k of A holds the columns m0.. of op(A)
 * contiguously; act runs on GC_VW of them at a time (gc_act_pack: the
 * bits of clremat_act8, every lane used, contiguous loads) into a private row,
 * whose runs of GC_MR floats are then copied into the micro-panels whole.
 * Rows past the block are zero, as gc_pack_a pads. */
void gc_pack_a_act_rows(__local float *Ap, __global const float *A, const long lda, const int M, const int m0,
                        const int mc, const int k0, const int kc, const int act)
{
    const int h = min(mc, M - m0), np = (mc + GC_MR - 1) / GC_MR;
    float t[GC_MC + GC_VW];
    for (int k = 0; k < kc; k++) {
        __global const float *s = A + (long)(k0 + k) * lda + m0;
        int i = 0;
        for (; i + 2 * GC_VW <= h; i += 2 * GC_VW) { /* two independent chains interleave */
            const gc_vec x0 = gc_vload(0, s + i), x1 = gc_vload(1, s + i);
            gc_vstore(gc_act_pack(act, x0), 0, t + i);
            gc_vstore(gc_act_pack(act, x1), 1, t + i);
        }
        for (; i + GC_VW <= h; i += GC_VW)
            gc_vstore(gc_act_pack(act, gc_vload(0, s + i)), 0, t + i);
        if (i < h) {
            float u[GC_VW];
            for (int j = 0; j < GC_VW; j++)
                u[j] = i + j < h ? s[i + j] : 0.0f;
            gc_vstore(gc_act_pack(act, gc_vload(0, u)), 0, t + i);
        }
        for (int q = h; q < np * GC_MR; q++)
            t[q] = 0.0f;
        for (int p = 0; p < np; p++) {
            __local float *d = Ap + (p * GC_KC + k) * GC_MR;
#if GC_MR == 12
            vstore8(vload8(0, t + p * GC_MR), 0, d);
            vstore4(vload4(0, t + p * GC_MR + 8), 0, d + 8);
#else
#pragma unroll
            for (int r = 0; r < GC_MR; r++)
                d[r] = t[p * GC_MR + r];
#endif
        }
    }
}

/* gc_pack_a for op(A) = A^T with whole micro-panels: row k of A holds the
 * columns m0.. of op(A) contiguously, so eight k at a time read eight
 * contiguous segments of A (streams, rather than GC_MR floats from every
 * row of A at a stride of lda per k, which a cache keeps poorly when lda is
 * a multiple of 4 KiB) and copy their runs of GC_MR floats into the
 * micro-panels.
 * np whole panels (the caller packs a last partial one); the same floats
 * as the per-panel loop. */
void gc_pack_a_rows_t(__local float *Ap, __global const float *A, const long lda, const int m0, const int np,
                      const int k0, const int kc)
{
    /* eight k at a time, panel by panel (see gc_pack_b_n_full), then the rest */
    const int k8 = kc / 8 * 8;
    for (int kb = 0; kb < kc; kb += 8)
        for (int p = 0; p < np; p++)
            for (int k = kb; k < (kb < k8 ? kb + 8 : kc); k++) {
                __global const float *s = A + (long)(k0 + k) * lda + m0 + p * GC_MR;
                __local float *d = Ap + (p * GC_KC + k) * GC_MR;
#if GC_MR == 12
                vstore8(vload8(0, s), 0, d);
                vstore4(vload4(0, s + 8), 0, d + 8);
#else
                vstore4(vload4(0, s), 0, d);
                vstore2(vload2(0, s + 4), 0, d + 4);
#endif
            }
}

/* Packs rows [m0, m0+mc) x k [k0, k0+kc) of op(A) into Ap as micro-panels
 * of GC_MR rows: Ap[(p * GC_KC + k) * GC_MR + r]. act != NONE: A holds a
 * pre-activation and act(A) is packed, computed by clremat_act8 (the bits
 * of the forward's and the recompute kernel's activation). */
void gc_pack_a(__local float *Ap, __global const float *A, const int tA, const long lda, const int M,
               const int m0, const int mc, const int k0, const int kc, const int act)
{
    const int np = (mc + GC_MR - 1) / GC_MR;
    if (tA && act != CLREMAT_ACT_NONE) {
        gc_pack_a_act_rows(Ap, A, lda, M, m0, mc, k0, kc, act);
        return;
    }
    int p0 = 0; /* micro-panels packed already */
    if (tA && act == CLREMAT_ACT_NONE) {
        p0 = min(mc, M - m0) / GC_MR;
        gc_pack_a_rows_t(Ap, A, lda, m0, p0, k0, kc);
    }
    for (int p = p0; p < np; p++) {
        __local float *dst = Ap + p * GC_KC * GC_MR;
        if (!tA && act == CLREMAT_ACT_NONE && m0 + p * GC_MR + GC_MR <= M && p * GC_MR + GC_MR <= mc) {
            /* a whole panel of rows: eight k of each of the GC_MR rows
             * loaded as float8 and stored transposed (the same floats as
             * the scalar loop below) */
            __global const float *src = A + (long)(m0 + p * GC_MR) * lda + k0;
            int k = 0;
            for (; k + 8 <= kc; k += 8) {
                float8 r[GC_MR];
#pragma unroll
                for (int i = 0; i < GC_MR; i++)
                    r[i] = vload8(0, src + (long)i * lda + k);
                gc_store_a8_t(dst + k * GC_MR, r);
            }
            for (; k < kc; k++)
                for (int i = 0; i < GC_MR; i++)
                    dst[k * GC_MR + i] = src[(long)i * lda + k];
            continue;
        }
        for (int r = 0; r < GC_MR; r++) {
            const int m = m0 + p * GC_MR + r;
            if (m < M && p * GC_MR + r < mc) {
                if (tA) {
                    continue; /* packed below, k outer: one cache line per k */
                } else {
                    __global const float *src = A + (long)m * lda + k0;
                    if (act != CLREMAT_ACT_NONE)
                        for (int k = 0; k < kc; k++)
                            dst[k * GC_MR + r] = clremat_act1(act, src[k]);
                    else
                        for (int k = 0; k < kc; k++)
                            dst[k * GC_MR + r] = src[k];
                }
            } else {
                for (int k = 0; k < kc; k++)
                    dst[k * GC_MR + r] = 0.0f;
            }
        }
        if (tA) {
            const int mb = m0 + p * GC_MR, h = min(GC_MR, min(M - mb, mc - p * GC_MR));
            __global const float *src = A + (long)k0 * lda + mb;
            if (GC_MR == 6 && h == GC_MR && act != CLREMAT_ACT_NONE) {
                /* the six values of a k in the lanes of one eight-wide activation */
                for (int k = 0; k < kc; k++) {
                    __global const float *s = src + (long)k * lda;
                    const float8 v = clremat_act8(act, (float8)(s[0], s[1], s[2], s[3], s[4], s[5], 0.0f, 0.0f));
                    dst[k * GC_MR + 0] = v.s0;
                    dst[k * GC_MR + 1] = v.s1;
                    dst[k * GC_MR + 2] = v.s2;
                    dst[k * GC_MR + 3] = v.s3;
                    dst[k * GC_MR + 4] = v.s4;
                    dst[k * GC_MR + 5] = v.s5;
                }
            } else if (GC_MR == 12 && h == GC_MR && act != CLREMAT_ACT_NONE) {
                /* the twelve values of a k in the lanes of two eight-wide activations */
                for (int k = 0; k < kc; k++) {
                    __global const float *s = src + (long)k * lda;
                    const float8 v = clremat_act8(act, vload8(0, s));
                    const float8 w = clremat_act8(act, (float8)(s[8], s[9], s[10], s[11], 0.0f, 0.0f, 0.0f, 0.0f));
                    vstore8(v, 0, dst + k * GC_MR);
                    vstore4(w.lo, 0, dst + k * GC_MR + 8);
                }
            } else if (h == GC_MR) {
                for (int k = 0; k < kc; k++) {
                    __global const float *s = src + (long)k * lda;
#pragma unroll
                    for (int r = 0; r < GC_MR; r++)
                        dst[k * GC_MR + r] = s[r];
                }
            } else {
                for (int k = 0; k < kc; k++)
                    for (int r = 0; r < h; r++)
                        dst[k * GC_MR + r] = act != CLREMAT_ACT_NONE ? clremat_act1(act, src[(long)k * lda + r])
                                                                     : src[(long)k * lda + r];
            }
        }
    }
}

/* The whole micro-panels [0, nfull) of gc_pack_b for op(B) = B: eight k
 * at a time, each of their rows of B read as one contiguous segment and
 * kept in cache while every panel gets its eight k (1 KiB of contiguous
 * stores each), rather than a k at a time, whose stores to the nfull
 * panels lie GC_KC * GC_NR floats apart (a multiple of 4 KiB: one cache
 * set) and evicted one another. The same floats in the same places. */
void gc_pack_b_n_full(__local float *Bp, __global const float *B, const long ldb, const int n0, const int nfull,
                      const int k0, const int kc)
{
    int k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int p = 0; p < nfull; p++) {
            __global const float *src = B + (long)(k0 + k) * ldb + n0 + p * GC_NR;
            __local float *dst = Bp + (p * GC_KC + k) * GC_NR;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                gc_vstore(gc_vload(0, src + j * ldb), 0, dst + j * GC_NR);
                gc_vstore(gc_vload(1, src + j * ldb), 1, dst + j * GC_NR);
            }
        }
    for (; k < kc; k++) {
        __global const float *src = B + (long)(k0 + k) * ldb + n0;
        for (int p = 0; p < nfull; p++) {
            __local float *dst = Bp + (p * GC_KC + k) * GC_NR;
            gc_vstore(gc_vload(0, src + p * GC_NR), 0, dst);
            gc_vstore(gc_vload(1, src + p * GC_NR), 1, dst);
        }
    }
}

/* Packs k [k0, k0+kc) x columns [n0, n0+nc) of op(B) into Bp as
 * micro-panels of GC_NR columns: Bp[(p * GC_KC + k) * GC_NR + j]. */
void gc_pack_b(__local float *Bp, __global const float *B, const int tB, const long ldb, const int N,
               const int n0, const int nc, const int k0, const int kc)
{
    const int np = (nc + GC_NR - 1) / GC_NR;
    if (!tB) {
        /* k outer: each k reads one contiguous row segment of B (streams) */
        int nfull = 0;
        while (nfull < np && n0 + (nfull + 1) * GC_NR <= N && (nfull + 1) * GC_NR <= nc)
            nfull++;
        gc_pack_b_n_full(Bp, B, ldb, n0, nfull, k0, kc);
        for (int p = nfull; p < np; p++) {
            __local float *dst = Bp + p * GC_KC * GC_NR;
            const int nb = n0 + p * GC_NR;
            const int w = min(GC_NR, min(N - nb, nc - p * GC_NR));
            __global const float *src = B + (long)k0 * ldb + nb;
            for (int k = 0; k < kc; k++)
                for (int j = 0; j < GC_NR; j++)
                    dst[k * GC_NR + j] = j < w ? src[(long)k * ldb + j] : 0.0f;
        }
        return;
    }
    for (int p = 0; p < np; p++) {
        __local float *dst = Bp + p * GC_KC * GC_NR;
        const int nb = n0 + p * GC_NR;
        const int w = min(GC_NR, min(N - nb, nc - p * GC_NR));
        if (w == GC_NR) {
            /* 8 x 8 blocks: eight rows of B^T loaded as float8, stored transposed */
            int k = 0;
            for (; k + 8 <= kc; k += 8)
                for (int jj = 0; jj < GC_NR; jj += 8) {
                    __global const float *src = B + (long)(nb + jj) * ldb + k0 + k;
                    const float8 r0 = vload8(0, src), r1 = vload8(0, src + ldb), r2 = vload8(0, src + 2 * ldb),
                                 r3 = vload8(0, src + 3 * ldb), r4 = vload8(0, src + 4 * ldb),
                                 r5 = vload8(0, src + 5 * ldb), r6 = vload8(0, src + 6 * ldb),
                                 r7 = vload8(0, src + 7 * ldb);
                    gc_store_b8x8_t(dst + k * GC_NR + jj, r0, r1, r2, r3, r4, r5, r6, r7);
                }
            for (; k < kc; k++)
                for (int j = 0; j < GC_NR; j++)
                    dst[k * GC_NR + j] = B[(long)(nb + j) * ldb + k0 + k];
        } else {
            for (int j = 0; j < GC_NR; j++) {
                if (j < w) {
                    __global const float *src = B + (long)(nb + j) * ldb + k0;
                    for (int k = 0; k < kc; k++)
                        dst[k * GC_NR + j] = src[k];
                } else {
                    for (int k = 0; k < kc; k++)
                        dst[k * GC_NR + j] = 0.0f;
                }
            }
        }
    }
}

/* The register tile's k loop over the first ROWS rows of micro-panel ap
 * of packed A and the GC_NR columns of B at BP, row k at BP + k * BSTRIDE
 * (a packed panel, or B itself: see directB). */
#define GC_TILE_LOOP_ROWS(BP, BSTRIDE, ROWS)                                                                       \
    for (int k = 0; k < kc; k++) {                                                                                \
        const gc_vec b0 = gc_vload(0, (BP) + k * (BSTRIDE)), b1 = gc_vload(1, (BP) + k * (BSTRIDE));               \
        __local const float *a = ap + k * GC_MR;                                                                  \
        _Pragma("unroll") for (int r = 0; r < (ROWS); r++)                                                         \
        {                                                                                                          \
            const float av = a[r];                                                                                 \
            c0[r] = CLREMAT_FMA((gc_vec)(av), b0, c0[r]);                                                          \
            c1[r] = CLREMAT_FMA((gc_vec)(av), b1, c1[r]);                                                          \
        }                                                                                                          \
    }

/* The tile's k loop over its rows inside C (rows): a panel at C's lower
 * edge with at most a third or two thirds of GC_MR rows inside runs only
 * those (M = 256 on the 12-row tile: the last panel's 4 rows, not 12).
 * The rows left out stay zero and are not written back; every row run
 * does the same multiply-adds in the same order, so the same bits. */
#define GC_TILE_LOOP(BP, BSTRIDE)                                                                                  \
    if (rows <= GC_MR / 3) {                                                                                       \
        GC_TILE_LOOP_ROWS(BP, BSTRIDE, GC_MR / 3)                                                                  \
    } else if (rows <= 2 * GC_MR / 3) {                                                                            \
        GC_TILE_LOOP_ROWS(BP, BSTRIDE, 2 * GC_MR / 3)                                                              \
    } else {                                                                                                       \
        GC_TILE_LOOP_ROWS(BP, BSTRIDE, GC_MR)                                                                      \
    }

/* C (and, with epi, out) of one work-group's block; see the section
 * comment. epi: 0 plain; 1 last k-block applies bias (use_bias) and act;
 * 3 last k-block multiplies C by act'(X), X at out in C's layout (an
 * activation's backward fused into the GEMM that produces its incoming
 * gradient: clremat_act_bwdw's bits); 4 as 3, and X becomes act(X) in
 * place (the activation's output recomputed where its pre-activation is
 * read for the last time; the forward's bits); 2 the optimizer update
 * (clremat_opt8, kind okind, hyperparameters hp):
 * the product is a parameter's gradient, which is not stored: C is the
 * parameter, out its first optimizer state, s1 its second; the host
 * launches it only with alpha 1, beta 0, batch 1 and K within one k-block,
 * so the gradient is the one float the plain product would have stored.
 * actA != NONE: op(A) is act(A), applied while packing (gc_pack_a).
 * fA, fB: 16-bit operands widened while packing; fC: C16 receives the
 * rounded result (C then holds the k-blocks' float32 partial sums, and with
 * keepC the float32 result too). directB: the tiles read a float32,
 * untransposed B where it is instead of packing it, in column blocks of
 * whole tiles (the host sets it for small launches with B's rows close and
 * aligned: gemm_split.c); the same floats in the same order, the same bits. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void clremat_gemm_cpu(const int tA, const int tB, const int M, const int N, const int K, const float alpha,
                      __global const float *A, const long offA, const long lda, const long sa,
                      __global const float *B, const long offB, const long ldb, const long sb,
                      const float beta, __global float *C, const long offC, const long ldc, const long sc,
                      const int epi, const int use_bias, const int act, __global const float *bias,
                      __global float *out, const int bm, const int bn, __global float *s1, const float8 hp,
                      const int okind, const int actA, const int fA, const int fB, const int fC, const int accC,
                      __global uchar *C16, const int keepC, const int directB)
{
    __local float Ap[GC_MC * GC_KC];
    __local float Bp[GC_KC * GC_NC];
    /* bm x bn (at most GC_MC x GC_NC) is this launch's block: smaller for
     * small problems so that every compute unit gets work-groups. The
     * result does not depend on it: every C element sums the same k-blocks
     * in the same order. */
    const int m0 = get_group_id(1) * bm;
    const long bz = get_group_id(2);
    const int mc = min(bm, M - m0);
    const int nkb = K > 0 ? (K + GC_KC - 1) / GC_KC : 1;
    /* Each work-group walks ncb column blocks of bn within each k-block,
     * its A block packed once for all of them: one with a work-group per
     * column block, all where the host launches one work-group column
     * (rows split only: A packed through an activation, act then runs once
     * per element of A). Each C element still sums its k-blocks in order. */
    const int ncb = ((N + bn - 1) / bn + get_num_groups(0) - 1) / get_num_groups(0);
    /* 16-bit operands (fA, fB) and C (fC: C is then the float32 scratch of
     * the k-blocks' partial sums, C16 and out the 16-bit results) */
    __global const uchar *A16 = (__global const uchar *)A + 2 * (offA + bz * sa);
    __global const uchar *B16 = (__global const uchar *)B + 2 * (offB + bz * sb);
    __global uchar *out16 = (__global uchar *)out + 2 * (offC + bz * sc);
    C16 += 2 * (offC + bz * sc);
    A += offA + bz * sa;
    B += offB + bz * sb;
    C += offC + bz * sc;
    if (epi)
        out += offC + bz * sc;
    for (int kb = 0; kb < nkb; kb++) {
        const int k0 = kb * GC_KC, kc = min(GC_KC, K - k0);
        const int last = kb == nkb - 1;
        if (kc > 0) {
            if (fA)
                gc_pack_a16(Ap, A16, fA, tA, lda, M, m0, mc, k0, kc);
            else
                gc_pack_a(Ap, A, tA, lda, M, m0, mc, k0, kc, actA);
        }
        for (int cb = 0; cb < ncb; cb++) {
        /* (the column block's body below keeps its indentation) */
        const int n0 = (get_group_id(0) * ncb + cb) * bn, nc = min(bn, N - n0);
        if (n0 >= N)
            break;
        const int directb = directB && !fB && !tB && nc % GC_NR == 0;
        if (kc > 0 && !directb) {
            if (fB)
                gc_pack_b16(Bp, B16, fB, tB, ldb, N, n0, nc, k0, kc);
            else
                gc_pack_b(Bp, B, tB, ldb, N, n0, nc, k0, kc);
        }
        for (int pi = 0; pi * GC_MR < mc; pi++) {
            __local const float *ap = Ap + pi * GC_KC * GC_MR;
            const int rows = min(GC_MR, min(mc - pi * GC_MR, M - m0 - pi * GC_MR)); /* the panel's rows inside C */
            for (int pj = 0; pj * GC_NR < nc; pj++) {
                gc_vec c0[GC_MR], c1[GC_MR];
                float acc[GC_MR][GC_NR];
#pragma unroll
                for (int r = 0; r < GC_MR; r++)
                    c0[r] = c1[r] = 0.0f;
                if (directb) {
                    __global const float *bg = B + (long)k0 * ldb + n0 + pj * GC_NR;
                    GC_TILE_LOOP(bg, ldb)
                } else {
                    __local const float *bp = Bp + pj * GC_KC * GC_NR;
                    GC_TILE_LOOP(bp, GC_NR)
                }
                const int mrow = m0 + pi * GC_MR, ncol = n0 + pj * GC_NR;
                if (mrow + GC_MR <= M && ncol + GC_NR <= N && pj * GC_NR + GC_NR <= nc) {
                    /* whole tile inside C: vector write-back, same arithmetic as below */
                    if (epi == 2) {
                        for (int r = 0; r < GC_MR; r++) {
                            const long ci = (long)(mrow + r) * ldc + ncol;
                            gc_vec p0 = gc_vload(0, C + ci), p1 = gc_vload(1, C + ci);
                            gc_vec a0 = gc_vload(0, out + ci), a1 = gc_vload(1, out + ci);
                            gc_vec b0 = okind ? gc_vload(0, s1 + ci) : (gc_vec)(0.0f);
                            gc_vec b1 = okind ? gc_vload(1, s1 + ci) : (gc_vec)(0.0f);
                            gc_opt(okind, hp, alpha * c0[r], &p0, &a0, &b0);
                            gc_opt(okind, hp, alpha * c1[r], &p1, &a1, &b1);
                            gc_vstore(p0, 0, C + ci);
                            gc_vstore(p1, 1, C + ci);
                            gc_vstore(a0, 0, out + ci);
                            gc_vstore(a1, 1, out + ci);
                            if (okind) {
                                gc_vstore(b0, 0, s1 + ci);
                                gc_vstore(b1, 1, s1 + ci);
                            }
                        }
                        continue;
                    }
#pragma unroll
                    for (int r = 0; r < GC_MR; r++) {
                        __global float *cr = C + (long)(mrow + r) * ldc + ncol;
                        gc_vec v0 = alpha * c0[r], v1 = alpha * c1[r];
                        if (kb > 0) {
                            v0 = gc_vload(0, cr) + v0;
                            v1 = gc_vload(1, cr) + v1;
                        } else if (beta != 0.0f) {
                            v0 = v0 + beta * gc_vload(0, cr);
                            v1 = v1 + beta * gc_vload(1, cr);
                        }
                        if (last && epi >= 3) {
                            __global float *xr = out + (long)(mrow + r) * ldc + ncol;
                            const gc_vec x0 = gc_vload(0, xr), x1 = gc_vload(1, xr);
                            if (epi == 4) { /* X becomes act(X): the forward's bits (gc_dact_act) */
                                gc_vec a0, a1;
                                gc_vstore(v0 * gc_dact_act(act, x0, &a0), 0, cr);
                                gc_vstore(v1 * gc_dact_act(act, x1, &a1), 1, cr);
                                gc_vstore(a0, 0, xr);
                                gc_vstore(a1, 1, xr);
                                continue;
                            }
                            gc_vstore(v0 * gc_dact(act, x0), 0, cr);
                            gc_vstore(v1 * gc_dact(act, x1), 1, cr);
                            continue;
                        }
                        if (last && epi && use_bias) {
                            v0 = v0 + gc_vload(0, bias + ncol);
                            v1 = v1 + gc_vload(1, bias + ncol);
                        }
                        if (last && fC) {
                            if (keepC) {
                                gc_vstore(v0, 0, cr);
                                gc_vstore(v1, 1, cr);
                            }
                            gc16_epi(C16, out16, fC, accC, epi ? act : CLREMAT_ACT_NONE,
                                     (long)(mrow + r) * ldc + ncol, v0, v1);
                            continue;
                        }
                        gc_vstore(v0, 0, cr);
                        gc_vstore(v1, 1, cr);
                        if (last && epi && act != CLREMAT_ACT_NONE) {
                            __global float *o = out + (long)(mrow + r) * ldc + ncol;
                            gc_vstore(gc_act(act, v0), 0, o);
                            gc_vstore(gc_act(act, v1), 1, o);
                        }
                    }
                    continue;
                }
#pragma unroll
                for (int r = 0; r < GC_MR; r++) {
                    gc_vstore(c0[r], 0, acc[r]);
                    gc_vstore(c1[r], 1, acc[r]);
                }
                for (int r = 0; r < GC_MR; r++) {
                    const int m = m0 + pi * GC_MR + r;
                    if (m >= M)
                        break;
                    for (int j = 0; j < GC_NR; j++) {
                        const int n = n0 + pj * GC_NR + j;
                        if (n >= N || pj * GC_NR + j >= nc)
                            break;
                        {
                            const long ci = (long)m * ldc + n;
                            float v = alpha * acc[r][j];
                            if (epi == 2) {
                                clremat_opt1(okind, hp, v, C, out, s1, ci);
                                continue;
                            }
                            if (kb > 0)
                                v = C[ci] + v;
                            else if (beta != 0.0f)
                                v = v + beta * C[ci];
                            if (last && epi >= 3) {
                                const float x = out[ci];
                                C[ci] = v * clremat_dact1(act, x);
                                if (epi == 4)
                                    out[ci] = clremat_act1(act, x);
                                continue;
                            }
                            if (last && fC) {
                                if (epi && use_bias)
                                    v = v + bias[n];
                                if (keepC)
                                    C[ci] = v;
                                gc16_epi8(C16, out16, fC, accC, epi ? act : CLREMAT_ACT_NONE, ci, 1, (float8)(v));
                                continue;
                            }
                            if (last && epi) {
                                if (use_bias)
                                    v = v + bias[n];
                                C[ci] = v;
                                if (act != CLREMAT_ACT_NONE)
                                    out[ci] = clremat_act1(act, v);
                            } else {
                                C[ci] = v;
                            }
                        }
                    }
                }
            }
        }
        } /* column blocks */
    }
}

/* ======================================================================
 * The optimizer update, shared by the step kernels and the updates fused
 * into the backward (backend/optim.c, docs/ARCHITECTURE.md "The fused
 * update"). kind: 0 SGD with momentum, 1 Adam, 2 AdamW. hp: s0 lr,
 * s1 momentum (SGD) or beta1, s2 beta2, s3 eps, s4 weight decay, s5 and s6
 * the bias corrections 1 - beta1^t and 1 - beta2^t. wd is added to the
 * gradient (L2) for SGD and Adam; AdamW decays the parameter (decoupled).
 * SGD: g' = g + wd p; v = momentum v + g'; p -= lr v.
 * Adam: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * p -= lr (m/bc1) / (sqrt(v/bc2) + eps) [+ lr wd p when decoupled].
 * Every caller computes through this eight-wide function (one float:
 * clremat_opt1, lane 0), so fused and unfused updates have the same bits.
 * ====================================================================== */
void clremat_opt8(const int kind, const float8 hp, const float8 g, float8 *p, float8 *s0, float8 *s1)
{
    const float lr = hp.s0, wd = hp.s4;
    if (kind == 0) {
        const float8 gi = g + wd * *p;
        const float8 vi = hp.s1 * *s0 + gi;
        *s0 = vi;
        *p = *p - lr * vi;
    } else {
        const float b1 = hp.s1, b2 = hp.s2, eps = hp.s3, bc1 = hp.s5, bc2 = hp.s6;
        const int decoupled = kind == 2;
        const float8 pi = *p;
        const float8 gi = decoupled ? g : g + wd * pi;
        const float8 mi = b1 * *s0 + (1.0f - b1) * gi;
        const float8 vi = b2 * *s1 + (1.0f - b2) * gi * gi;
        float8 upd = (mi / bc1) / (sqrt(vi / bc2) + eps);
        *s0 = mi;
        *s1 = vi;
        if (decoupled)
            upd += wd * pi;
        *p = pi - lr * upd;
    }
}

/* The update of element i (p[i], s0[i], s1[i] for Adam) by gradient g,
 * computed by clremat_opt8 (lane 0). */
void clremat_opt1(const int kind, const float8 hp, const float g, __global float *p, __global float *s0,
                  __global float *s1, const long i)
{
    float8 pv = (float8)(p[i]), a = (float8)(s0[i]), b = (float8)(kind ? s1[i] : 0.0f);
    clremat_opt8(kind, hp, (float8)(g), &pv, &a, &b);
    p[i] = pv.s0;
    s0[i] = a.s0;
    if (kind)
        s1[i] = b.s0;
}

/* The update of the eight elements from c0 (p, s0, s1 for Adam) by the
 * gradients g, computed by clremat_opt8. */
void clremat_opt_cols8(const int kind, const float8 hp, const float8 g, __global float *p, __global float *s0,
                       __global float *s1, const int c0)
{
    float8 pv = vload8(0, p + c0), a = vload8(0, s0 + c0), b = kind ? vload8(0, s1 + c0) : (float8)(0.0f);
    clremat_opt8(kind, hp, g, &pv, &a, &b);
    vstore8(pv, 0, p + c0);
    vstore8(a, 0, s0 + c0);
    if (kind)
        vstore8(b, 0, s1 + c0);
}

/* The update of elements [i0, i0+8) (none past n) from a gradient buffer. */
void clremat_opt_run8(const int kind, const float8 hp, const int n, const int i0, __global float *p,
                      __global const float *g, __global float *s0, __global float *s1)
{
    float8 pv = clremat_load8(p, i0, n), a = clremat_load8(s0, i0, n);
    float8 b = kind ? clremat_load8(s1, i0, n) : (float8)(0.0f);
    clremat_opt8(kind, hp, clremat_load8(g, i0, n), &pv, &a, &b);
    clremat_store8(p, i0, n, pv);
    clremat_store8(s0, i0, n, a);
    if (kind)
        clremat_store8(s1, i0, n, b);
}

/* SGD with momentum over n floats, eight per work-item (ceil(n / 8) items).
 * skip (may be NULL): a count of non-finite gradients (mixed_float16's
 * loss scaling); not zero, the step changes nothing (clremat_opt_step_unless).
 * The same for Adam below. */
__kernel void clremat_sgd_step(const int n, const float lr, const float momentum, const float wd,
                               __global float *p, __global const float *g, __global float *v,
                               __global const int *skip)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n && !(skip && *skip))
        clremat_opt_run8(0, (float8)(lr, momentum, 0.0f, 0.0f, wd, 1.0f, 1.0f, 0.0f), n, i0, p, g, v, v);
}

/* Adam / AdamW over n floats, eight per work-item (ceil(n / 8) items). */
__kernel void clremat_adam_step(const int n, const float lr, const float b1, const float b2, const float eps,
                                const float wd, const int decoupled, const float bc1, const float bc2,
                                __global float *p, __global const float *g, __global float *m,
                                __global float *v, __global const int *skip)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n && !(skip && *skip))
        clremat_opt_run8(decoupled ? 2 : 1, (float8)(lr, b1, b2, eps, wd, bc1, bc2, 0.0f), n, i0, p, g, m, v);
}

/* ======================================================================
 * Benchmark: a STREAM-like copy, eight floats per work-item (launch
 * ceil(n / 8)), the reference bandwidth bench/stream_bench compares the
 * elementwise and optimizer kernels with.
 * ====================================================================== */
__kernel void clremat_stream_copy8(const int n, __global const float *x, __global float *y)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n)
        clremat_store8(y, i0, n, clremat_load8(x, i0, n));
}

/* ---- small language models: rmsnorm, rope, multiply (issue 13) ---- */
/* Launchers: backend/layer_rmsnorm.c, layer_rope.c (also used by
 * layer_attention.c for RoPE on q and k), layer_multiply.c. One work-item
 * per row, column or element; every sum runs in a fixed order. */

/* RMSNorm forward, one work-item per row: rstd = 1 / sqrt(mean(x^2) + eps),
 * y = scale * x * rstd; rstd[r] kept for the backward. */
__kernel void rms_forward(const int rows, const int D, const float eps, __global const float *x,
                          __global const float *scale, __global float *y, __global float *rstd)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + (size_t)r * D;
    __global float *yr = y + (size_t)r * D;
    float s = 0.0f;
    for (int d = 0; d < D; d++)
        s += xr[d] * xr[d];
    const float rs = 1.0f / sqrt(s / (float)D + eps);
    for (int d = 0; d < D; d++)
        yr[d] = scale[d] * (xr[d] * rs);
    rstd[r] = rs;
}

/* RMSNorm input gradient, one work-item per row:
 * dx = rstd * (scale dy - x rstd^2 mean(scale dy x)); added into dx when acc. */
__kernel void rms_backward_dx(const int rows, const int D, const int acc, __global const float *x,
                              __global const float *rstd, __global const float *scale, __global const float *dy,
                              __global float *dx)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + (size_t)r * D;
    __global const float *dyr = dy + (size_t)r * D;
    __global float *dxr = dx + (size_t)r * D;
    const float rs = rstd[r];
    float b = 0.0f;
    for (int d = 0; d < D; d++)
        b += scale[d] * dyr[d] * xr[d];
    b = b / (float)D * rs * rs;
    for (int d = 0; d < D; d++) {
        const float v = rs * (scale[d] * dyr[d] - xr[d] * b);
        dxr[d] = acc ? dxr[d] + v : v;
    }
}

/* RMSNorm scale gradient, one work-item per column d, rows in order:
 * dscale[d] = sum dy * x * rstd. */
__kernel void rms_backward_scale(const int rows, const int D, __global const float *x, __global const float *rstd,
                                 __global const float *dy, __global float *dscale, const int r0)
{
    const int d = get_global_id(0);
    if (d >= D)
        return;
    float s = r0 > 0 ? dscale[d] : 0.0f;
    for (int r = r0; r < rows; r++)
        s += dy[(size_t)r * D + d] * (x[(size_t)r * D + d] * rstd[r]);
    dscale[d] = s;
}

/* Rotary position embedding, Llama's half-split convention: in each chunk
 * of dh columns, columns i and i + dh/2 (i < dh/2) rotate by the angle
 * t * theta^(-2i/dh), t = row % T (the position); sign -1 rotates back (the
 * backward). Rows of ld_src / ld_dst floats from offsets off_src / off_dst;
 * nh chunks per row. One work-item per pair; dst may be src (in place); acc
 * adds into dst. */
__kernel void rope_apply(const int n, const int T, const int nh, const int dh, const float theta, const float sign,
                         const int acc, const int ld_src, const int off_src, __global const float *src,
                         const int ld_dst, const int off_dst, __global float *dst)
{
    const int e = get_global_id(0);
    if (e >= n)
        return;
    const int hw = dh / 2;
    const int i = e % hw, h = (e / hw) % nh, row = e / (hw * nh);
    const float inv = 1.0f / pow(theta, (float)(2 * i) / (float)dh);
    const float ang = (float)(row % T) * inv;
    const float c = cos(ang), s = sign * sin(ang);
    const size_t ps = (size_t)off_src + (size_t)row * ld_src + (size_t)h * dh + i;
    const size_t pd = (size_t)off_dst + (size_t)row * ld_dst + (size_t)h * dh + i;
    const float x1 = src[ps], x2 = src[ps + hw];
    const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    dst[pd] = acc ? dst[pd] + y1 : y1;
    dst[pd + hw] = acc ? dst[pd + hw] + y2 : y2;
}

/* dst = x * y elementwise, added into dst when acc (multiply forward and
 * both input gradients). */
__kernel void mul_acc(const int n, const int acc, __global float *dst, __global const float *x,
                      __global const float *y)
{
    const int i = get_global_id(0);
    if (i < n)
        dst[i] = acc ? dst[i] + x[i] * y[i] : x[i] * y[i];
}

/* Embedding table gradient added into gtable (a table tied to an output
 * projection whose backward wrote gtable first): one work-item per vocab
 * row, tokens in order, as emb_backward_table without the zeroing. */
__kernel void emb_backward_table_acc(const int ntok, const int dim, const int vocab, __global const float *ids,
                                     __global const float *dout, __global float *gtable, const int t0)
{
    const int v = get_global_id(0);
    if (v >= vocab)
        return;
    __global float *g = gtable + (size_t)v * dim;
    for (int tok = t0; tok < ntok; tok++) {
        if (seq_clamp_id(ids[tok], vocab) != v)
            continue;
        __global const float *src = dout + (size_t)tok * dim;
        for (int d = 0; d < dim; d++)
            g[d] += src[d];
    }
}


/* ------------------------------------------------------------------------
 * Memory-efficient attention (backend/attention_flash.c): the FlashAttention
 * recurrence. The T x T probabilities are never stored: the forward keeps
 * per row the running maximum m and the sum of exponentials l (the "stats"
 * slot: m of every (batch, head, row) first, then every l); the backward
 * recomputes the scores tile by tile from q, k and the stats.
 * Geometry shared by the kernels: qkv rows hold ld floats; head h's query
 * starts at column qo + h*dh; query heads share kv heads in groups of
 * H / KVH, so head h reads kv head g = h / (H / KVH), its key at column
 * ko + g*dh and its value at vo + g*dh. O and dO rows hold ldo floats, head
 * h at column h*dh. Tiles live in local memory sized by the launcher from
 * the device's limits: BR query rows, BC key rows. Dropout on the
 * probabilities regenerates the plain layer's mask: element (bh*T+i)*T+j.
 * Every sum runs in a fixed order, so results are deterministic (the dk/dv
 * kernel sums the H / KVH query heads of its kv head in head order). */

/* Forward: one work-group of BR items per (query block, batch*head); item r
 * owns query row i = block*BR + r. O = softmax(q k^T * scale) v. */
__kernel void flash_attn_fwd(const int T, const int H, const int KVH, const int dh, const int ld, const int qo,
                             const int ko, const int vo, const int ldo, const int causal, const float scale,
                             const int BR, const int BC, const float rate, const uint slo, const uint shi,
                             const uint step, const uint layer, const uint eoff, const int nbh, __global const float *qkv,
                             __global float *O, __global float *stats, __local float *Qs, __local float *Ks,
                             __local float *Vs, __local float *S, __local float *Acc)
{
    const int r = get_local_id(0), i0 = get_group_id(0) * BR, bh = get_group_id(1);
    const int b = bh / H, h = bh % H, g = h / (H / KVH);
    const int i = i0 + r, valid = i < T;
    const int kend = causal ? min(T, i0 + BR) : T;
    __local float *q = Qs + r * dh, *acc = Acc + r * dh, *s = S + r * BC;
    float m = -INFINITY, l = 0.0f;
    if (valid) {
        __global const float *src = qkv + (size_t)(b * T + i) * ld + qo + h * dh;
        for (int d = 0; d < dh; d++) {
            q[d] = src[d];
            acc[d] = 0.0f;
        }
    }
    for (int j0 = 0; j0 < kend; j0 += BC) {
        const int nc = min(BC, kend - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = r; e < nc * dh; e += BR) {
            const int jj = e / dh, d = e - jj * dh;
            const size_t row = (size_t)(b * T + j0 + jj) * ld;
            Ks[e] = qkv[row + ko + g * dh + d];
            Vs[e] = qkv[row + vo + g * dh + d];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (valid) {
            const int lim = causal ? min(nc, i - j0 + 1) : nc;
            if (lim > 0) {
                float mt = m;
                for (int jj = 0; jj < lim; jj++) {
                    float dot = 0.0f;
                    for (int d = 0; d < dh; d++)
                        dot = CLREMAT_FMA(q[d], Ks[jj * dh + d], dot);
                    s[jj] = dot * scale;
                    mt = fmax(mt, s[jj]);
                }
                if (mt > m) {
                    const float alpha = exp(m - mt);
                    l *= alpha;
                    for (int d = 0; d < dh; d++)
                        acc[d] *= alpha;
                    m = mt;
                }
                for (int jj = 0; jj < lim; jj++) {
                    float p = exp(s[jj] - m);
                    l += p;
                    if (rate > 0.0f)
                        p *= attn_keep(rate, slo, shi, step, layer, (uint)(((size_t)bh * T + i) * T + j0 + jj) + eoff);
                    for (int d = 0; d < dh; d++)
                        acc[d] = CLREMAT_FMA(p, Vs[jj * dh + d], acc[d]);
                }
            }
        }
    }
    if (valid) {
        const float inv = 1.0f / l;
        __global float *dst = O + (size_t)(b * T + i) * ldo + h * dh;
        for (int d = 0; d < dh; d++)
            dst[d] = acc[d] * inv;
        stats[(size_t)bh * T + i] = m;
        stats[(size_t)nbh * T + (size_t)bh * T + i] = l;
    }
}

/* The backward kernels read dO and write Dv and dqkv at float offsets
 * off_do, off_dv, off_dq into their buffers (parts of one workspace). */

/* Backward, first pass: Dv[bh*T+i] = sum_d dO[i, d] * O[i, d] (the rowsum
 * of dO * O, equal to sum_j P_ij dP_ij), one item per (batch*head, row). */
__kernel void flash_attn_bwd_dot(const int n, const int T, const int H, const int dh, const int ldo,
                                 const int off_do, const int off_dv, __global const float *dO,
                                 __global const float *O, __global float *Dv)
{
    const int idx = get_global_id(0);
    if (idx >= n)
        return;
    dO += off_do;
    Dv += off_dv;
    const int bh = idx / T, i = idx - bh * T, b = bh / H, h = bh % H;
    const size_t row = (size_t)(b * T + i) * ldo + h * dh;
    float s = 0.0f;
    for (int d = 0; d < dh; d++)
        s += dO[row + d] * O[row + d];
    Dv[idx] = s;
}

/* Backward, dk and dv: one work-group of BC items per (key block,
 * batch*kv head); item c owns key row j and sums over every query head of
 * its group and every query tile: dv_j += P_ij keep_ij dO_i,
 * dk_j += scale * P_ij (keep_ij dO_i.v_j - D_i) q_i. */
__kernel void flash_attn_bwd_dkdv(const int T, const int H, const int KVH, const int dh, const int ld, const int qo,
                                  const int ko, const int vo, const int ldo, const int causal, const float scale,
                                  const int BR, const int BC, const float rate, const uint slo, const uint shi,
                                  const uint step, const uint layer, const uint eoff, const int nbh, const int off_do, const int off_dv, const int off_dq,
                                  __global const float *qkv,
                                  __global const float *dO, __global const float *stats, __global const float *Dv,
                                  __global float *dqkv, __local float *Kj, __local float *Vj, __local float *dK,
                                  __local float *dV, __local float *Qs, __local float *dOs, __local float *Rs)
{
    dO += off_do;
    Dv += off_dv;
    dqkv += off_dq;
    const int c = get_local_id(0), j0 = get_group_id(0) * BC, bg = get_group_id(1);
    const int b = bg / KVH, g = bg % KVH, G = H / KVH;
    const int j = j0 + c, valid = j < T;
    const int istart = causal ? (j0 / BR) * BR : 0;
    __local float *k = Kj + c * dh, *v = Vj + c * dh, *dk = dK + c * dh, *dv = dV + c * dh;
    if (valid) {
        const size_t row = (size_t)(b * T + j) * ld;
        for (int d = 0; d < dh; d++) {
            k[d] = qkv[row + ko + g * dh + d];
            v[d] = qkv[row + vo + g * dh + d];
            dk[d] = 0.0f;
            dv[d] = 0.0f;
        }
    }
    for (int hh = 0; hh < G; hh++) {
        const int h = g * G + hh, bh = b * H + h;
        for (int i0 = istart; i0 < T; i0 += BR) {
            const int nr = min(BR, T - i0);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = c; e < nr * dh; e += BC) {
                const int ii = e / dh, d = e - ii * dh;
                Qs[e] = qkv[(size_t)(b * T + i0 + ii) * ld + qo + h * dh + d];
                dOs[e] = dO[(size_t)(b * T + i0 + ii) * ldo + h * dh + d];
            }
            for (int e = c; e < nr; e += BC) {
                Rs[e] = stats[(size_t)bh * T + i0 + e];
                Rs[BR + e] = 1.0f / stats[(size_t)nbh * T + (size_t)bh * T + i0 + e];
                Rs[2 * BR + e] = Dv[(size_t)bh * T + i0 + e];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (!valid)
                continue;
            for (int ii = causal ? max(0, j - i0) : 0; ii < nr; ii++) {
                const int i = i0 + ii;
                float sd = 0.0f, dpd = 0.0f, kf = 1.0f;
                for (int d = 0; d < dh; d++) {
                    sd = CLREMAT_FMA(Qs[ii * dh + d], k[d], sd);
                    dpd = CLREMAT_FMA(dOs[ii * dh + d], v[d], dpd);
                }
                const float sv = sd * scale;
                const float p = exp(sv - Rs[ii]) * Rs[BR + ii];
                if (rate > 0.0f)
                    kf = attn_keep(rate, slo, shi, step, layer, (uint)(((size_t)bh * T + i) * T + j) + eoff);
                const float pd = p * kf, ds = scale * p * (dpd * kf - Rs[2 * BR + ii]);
                for (int d = 0; d < dh; d++) {
                    dv[d] = CLREMAT_FMA(pd, dOs[ii * dh + d], dv[d]);
                    dk[d] = CLREMAT_FMA(ds, Qs[ii * dh + d], dk[d]);
                }
            }
        }
    }
    if (valid) {
        const size_t row = (size_t)(b * T + j) * ld;
        for (int d = 0; d < dh; d++) {
            dqkv[row + ko + g * dh + d] = dk[d];
            dqkv[row + vo + g * dh + d] = dv[d];
        }
    }
}

/* Backward, dq: one work-group of BR items per (query block, batch*head);
 * item r owns query row i: dq_i = scale * sum_j P_ij (keep_ij dO_i.v_j - D_i) k_j. */
__kernel void flash_attn_bwd_dq(const int T, const int H, const int KVH, const int dh, const int ld, const int qo,
                                const int ko, const int vo, const int ldo, const int causal, const float scale,
                                const int BR, const int BC, const float rate, const uint slo, const uint shi,
                                const uint step, const uint layer, const uint eoff, const int nbh, const int off_do, const int off_dv, const int off_dq,
                                  __global const float *qkv,
                                __global const float *dO, __global const float *stats, __global const float *Dv,
                                __global float *dqkv, __local float *Qs, __local float *dOs, __local float *dQ,
                                __local float *Ks, __local float *Vs)
{
    dO += off_do;
    Dv += off_dv;
    dqkv += off_dq;
    const int r = get_local_id(0), i0 = get_group_id(0) * BR, bh = get_group_id(1);
    const int b = bh / H, h = bh % H, g = h / (H / KVH);
    const int i = i0 + r, valid = i < T;
    const int kend = causal ? min(T, i0 + BR) : T;
    __local float *q = Qs + r * dh, *dor = dOs + r * dh, *dq = dQ + r * dh;
    float mi = 0.0f, inv = 0.0f, Di = 0.0f;
    if (valid) {
        const size_t row = (size_t)(b * T + i);
        for (int d = 0; d < dh; d++) {
            q[d] = qkv[row * ld + qo + h * dh + d];
            dor[d] = dO[row * ldo + h * dh + d];
            dq[d] = 0.0f;
        }
        mi = stats[(size_t)bh * T + i];
        inv = 1.0f / stats[(size_t)nbh * T + (size_t)bh * T + i];
        Di = Dv[(size_t)bh * T + i];
    }
    for (int j0 = 0; j0 < kend; j0 += BC) {
        const int nc = min(BC, kend - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = r; e < nc * dh; e += BR) {
            const int jj = e / dh, d = e - jj * dh;
            const size_t row = (size_t)(b * T + j0 + jj) * ld;
            Ks[e] = qkv[row + ko + g * dh + d];
            Vs[e] = qkv[row + vo + g * dh + d];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!valid)
            continue;
        const int lim = causal ? min(nc, i - j0 + 1) : nc;
        for (int jj = 0; jj < lim; jj++) {
            float sd = 0.0f, dpd = 0.0f, kf = 1.0f;
            for (int d = 0; d < dh; d++) {
                sd = CLREMAT_FMA(q[d], Ks[jj * dh + d], sd);
                dpd = CLREMAT_FMA(dor[d], Vs[jj * dh + d], dpd);
            }
            const float sv = sd * scale;
            const float p = exp(sv - mi) * inv;
            if (rate > 0.0f)
                kf = attn_keep(rate, slo, shi, step, layer, (uint)(((size_t)bh * T + i) * T + j0 + jj) + eoff);
            const float ds = scale * p * (dpd * kf - Di);
            for (int d = 0; d < dh; d++)
                dq[d] = CLREMAT_FMA(ds, Ks[jj * dh + d], dq[d]);
        }
    }
    if (valid) {
        const size_t row = (size_t)(b * T + i) * ld + qo + h * dh;
        for (int d = 0; d < dh; d++)
            dqkv[row + d] = dq[d];
    }
}


/* ------------------------------------------------------------------------
 * Convolutional layers (NHWC): conv2d's im2col and its adjoint col2im,
 * max/avg pooling, global average pooling, zero padding. Every kernel
 * gathers (one work item per output element, sums in a fixed order), so
 * results are deterministic without atomics. Geometry: H, W, C input;
 * OH, OW output; KH, KW window; SH, SW strides; DH, DW dilation; PH, PW
 * padding before (Keras "same": the odd pixel after). */

/* col[r][g][k] for r = (n, oh, ow), k = (kh, kw, ci): the input pixel the
 * tap reads, 0 in the padding. G groups of CG channels; n = rows * G * K. */
__kernel void conv_im2col(const int n, const int H, const int W, const int C, const int OH, const int OW,
                          const int KH, const int KW, const int SH, const int SW, const int DH, const int DW,
                          const int PH, const int PW, const int G, const int CG, __global const float *x,
                          __global float *col)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int K = KH * KW * CG;
        const int k = i % K, rg = i / K;
        const int ci = k % CG, t = k / CG, kw = t % KW, kh = t / KW;
        const int g = rg % G, r = rg / G;
        const int ow = r % OW, r2 = r / OW, oh = r2 % OH, b = r2 / OH;
        const int ih = oh * SH - PH + kh * DH, iw = ow * SW - PW + kw * DW;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((b * H + ih) * W + iw) * C + g * CG + ci] : 0.0f;
    }
}

/* dx[b, ih, iw, c] (= or +=) the sum of the dcol entries that read it, taps
 * in (kh, kw) order. n = batch * H * W * C. */
__kernel void conv_col2im(const int n, const int acc, const int H, const int W, const int C, const int OH,
                          const int OW, const int KH, const int KW, const int SH, const int SW, const int DH,
                          const int DW, const int PH, const int PW, const int G, const int CG,
                          __global const float *dcol, __global float *dx)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, p = i / C, iw = p % W, p2 = p / W, ih = p2 % H, b = p2 / H;
        const int g = c / CG, ci = c % CG, K = KH * KW * CG;
        float s = 0.0f;
        for (int kh = 0; kh < KH; kh++) {
            const int th = ih + PH - kh * DH;
            if (th < 0 || th % SH != 0 || th / SH >= OH)
                continue;
            for (int kw = 0; kw < KW; kw++) {
                const int tw = iw + PW - kw * DW;
                if (tw < 0 || tw % SW != 0 || tw / SW >= OW)
                    continue;
                s += dcol[((((b * OH + th / SH) * OW + tw / SW) * G + g) * K) + (kh * KW + kw) * CG + ci];
            }
        }
        dx[i] = acc ? dx[i] + s : s;
    }
}

/* Max / average pooling forward; avg divides by the window's real inputs
 * (Keras "same"). mode 0 max, 1 avg. n = batch * OH * OW * C. */
__kernel void pool2d_fwd(const int n, const int mode, const int H, const int W, const int C, const int OH,
                         const int OW, const int KH, const int KW, const int SH, const int SW, const int PH,
                         const int PW, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, p = i / C, ow = p % OW, p2 = p / OW, oh = p2 % OH, b = p2 / OH;
        float s = mode ? 0.0f : -INFINITY;
        int cnt = 0;
        for (int kh = 0; kh < KH; kh++) {
            const int ih = oh * SH - PH + kh;
            if (ih < 0 || ih >= H)
                continue;
            for (int kw = 0; kw < KW; kw++) {
                const int iw = ow * SW - PW + kw;
                if (iw < 0 || iw >= W)
                    continue;
                const float v = x[((b * H + ih) * W + iw) * C + c];
                s = mode ? s + v : fmax(s, v);
                cnt++;
            }
        }
        y[i] = mode ? s / (float)cnt : s;
    }
}

/* Pooling backward, gathered per input element: avg adds dy / count of
 * every window holding it; max adds dy of every window whose first maximum
 * (scan order kh, kw) is this element. n = batch * H * W * C. */
__kernel void pool2d_bwd(const int n, const int mode, const int acc, const int H, const int W, const int C,
                         const int OH, const int OW, const int KH, const int KW, const int SH, const int SW,
                         const int PH, const int PW, __global const float *x, __global const float *dy,
                         __global float *dx)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, p = i / C, iw = p % W, p2 = p / W, ih = p2 % H, b = p2 / H;
        float s = 0.0f;
        for (int kh = 0; kh < KH; kh++) {
            const int th = ih + PH - kh;
            if (th < 0 || th % SH != 0 || th / SH >= OH)
                continue;
            const int oh = th / SH;
            for (int kw = 0; kw < KW; kw++) {
                const int tw = iw + PW - kw;
                if (tw < 0 || tw % SW != 0 || tw / SW >= OW)
                    continue;
                const int ow = tw / SW;
                /* the window (oh, ow): its count of real inputs, or its first maximum */
                int cnt = 0, arg = -1;
                float best = -INFINITY;
                for (int a = 0; a < KH; a++) {
                    const int jh = oh * SH - PH + a;
                    if (jh < 0 || jh >= H)
                        continue;
                    for (int e = 0; e < KW; e++) {
                        const int jw = ow * SW - PW + e;
                        if (jw < 0 || jw >= W)
                            continue;
                        cnt++;
                        if (!mode) {
                            const float v = x[((b * H + jh) * W + jw) * C + c];
                            if (arg < 0 || v > best) {
                                best = v;
                                arg = jh * W + jw;
                            }
                        }
                    }
                }
                const float d = dy[((b * OH + oh) * OW + ow) * C + c];
                if (mode)
                    s += d / (float)cnt;
                else if (arg == ih * W + iw)
                    s += d;
            }
        }
        dx[i] = acc ? dx[i] + s : s;
    }
}

/* Global average pooling: y[b, c] = mean over HW of x[b, :, :, c]; n = batch * C. */
__kernel void gap_fwd(const int n, const int HW, const int C, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, b = i / C;
        float s = 0.0f;
        for (int p = 0; p < HW; p++)
            s += x[(b * HW + p) * C + c];
        y[i] = s / (float)HW;
    }
}

/* dx[b, p, c] (= or +=) dy[b, c] / HW; n = batch * HW * C. */
__kernel void gap_bwd(const int n, const int acc, const int HW, const int C, __global const float *dy,
                      __global float *dx)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, b = i / (HW * C);
        const float d = dy[b * C + c] / (float)HW;
        dx[i] = acc ? dx[i] + d : d;
    }
}

/* Zero padding: y[b, oh, ow, c] = x[b, oh - PT, ow - PL, c] or 0;
 * n = batch * OH * OW * C. */
__kernel void zpad_fwd(const int n, const int H, const int W, const int C, const int OH, const int OW,
                       const int PT, const int PL, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, p = i / C, ow = p % OW, p2 = p / OW, oh = p2 % OH, b = p2 / OH;
        const int ih = oh - PT, iw = ow - PL;
        y[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((b * H + ih) * W + iw) * C + c] : 0.0f;
    }
}

/* Zero padding backward: dx (= or +=) the matching dy; n = batch * H * W * C. */
__kernel void zpad_bwd(const int n, const int acc, const int H, const int W, const int C, const int OH,
                       const int OW, const int PT, const int PL, __global const float *dy, __global float *dx)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, p = i / C, iw = p % W, p2 = p / W, ih = p2 % H, b = p2 / H;
        const float d = dy[((b * OH + ih + PT) * OW + iw + PL) * C + c];
        dx[i] = acc ? dx[i] + d : d;
    }
}

/* ------------------------------------------------------------------------
 * Batch normalization over the last dimension (C channels, R rows), laid
 * out row-major (x[r * C + c]). Work items take a group of 8 neighbouring
 * channels (vload8 / vstore8, any alignment) or, in the last group when C
 * is not a multiple of 8, the remaining channels one by one. The sums over
 * rows run in a fixed order that depends only on (R, C): NB blocks of RB
 * rows (backend/layer_batchnorm.c chooses them), each summed in row order
 * by one work item into partials (part, 2 NB C floats: [0, NB C) and
 * [NB C, 2 NB C), block b of channel c at b * C + c), then a finish kernel
 * combines the blocks in block order, one work item per channel. */

/* Block b's rows [r0, r1) of R rows in blocks of RB. */
#define BN_BLOCK(b, RB, R, r0, r1) \
    const int r0 = (b) * (RB), r1 = min((R), r0 + (RB))

/* Per block b and channel: the block's mean into part[b C + c] and its sum
 * of squared deviations from that mean (two passes over the block, which
 * stays in cache) into part[(NB + b) C + c]. Both sum the rows shifted by
 * the block's first row, so that a mean far from zero costs no precision.
 * Global (ceil(C / 8), NB). */
__kernel void bn_stats_part(const int R, const int C, const int RB, const int NB, __global const float *x,
                            __global float *part)
{
    const int g = get_global_id(0), b = get_global_id(1), c0 = g * 8;
    BN_BLOCK(b, RB, R, r0, r1);
    if (c0 >= C || b >= NB)
        return;
    const float inv = 1.0f / (float)(r1 - r0);
    if (c0 + 8 <= C) {
        const float8 k = vload8(0, x + (size_t)r0 * C + c0);
        float8 s = (float8)(0.0f), q = (float8)(0.0f);
        for (int r = r0; r < r1; r++)
            s += vload8(0, x + (size_t)r * C + c0) - k;
        const float8 m = s * inv;
        for (int r = r0; r < r1; r++) {
            const float8 d = (vload8(0, x + (size_t)r * C + c0) - k) - m;
            q += d * d;
        }
        vstore8(k + m, 0, part + (size_t)b * C + c0);
        vstore8(q, 0, part + (size_t)(NB + b) * C + c0);
    } else {
        for (int c = c0; c < C; c++) {
            const float k = x[(size_t)r0 * C + c];
            float s = 0.0f, q = 0.0f;
            for (int r = r0; r < r1; r++)
                s += x[(size_t)r * C + c] - k;
            const float m = s * inv;
            for (int r = r0; r < r1; r++) {
                const float d = (x[(size_t)r * C + c] - k) - m;
                q += d * d;
            }
            part[(size_t)b * C + c] = k + m;
            part[(size_t)(NB + b) * C + c] = q;
        }
    }
}

/* stats[c] = batch mean, stats[C + c] = 1 / sqrt(var + eps), stats[2C + c]
 * = var (biased, as Keras): the blocks' means and squared deviations merged
 * in block order (Chan et al.'s pairwise update). One work item per channel. */
__kernel void bn_stats_finish(const int R, const int C, const int RB, const int NB, const float eps,
                              __global const float *part, __global float *stats)
{
    const int c = get_global_id(0);
    if (c >= C)
        return;
    /* the running mean is mean + lo (a compensated sum: its updates are
     * small against it, and NB of them would otherwise lose bits) */
    float n = (float)min(R, RB), mean = part[c], lo = 0.0f, m2 = part[(size_t)NB * C + c];
    for (int b = 1; b < NB; b++) {
        BN_BLOCK(b, RB, R, r0, r1);
        const float nb = (float)(r1 - r0), nt = n + nb, d = (part[(size_t)b * C + c] - mean) - lo;
        const float inc = d * (nb / nt) + lo, t = mean + inc, back = t - mean;
        lo = (mean - (t - back)) + (inc - back);
        mean = t;
        m2 += part[(size_t)(NB + b) * C + c] + d * d * (n * (nb / nt));
        n = nt;
    }
    mean += lo;
    const float var = m2 / (float)R;
    stats[c] = mean;
    stats[C + c] = 1.0f / sqrt(var + eps);
    stats[2 * C + c] = var;
}

/* y = (x - mean) * (rstd * gamma) + beta; training: mean, rstd from stats;
 * evaluation (use_moving): mean = mm, rstd = 1 / sqrt(mv + eps). gamma /
 * beta may be NULL (scale / center off). Global (ceil(C / 8), ceil(R /
 * RPI)): RPI rows of one channel group per work item. */
__kernel void bn_apply(const int R, const int C, const int RPI, const int use_moving, const float eps,
                       __global const float *x, __global const float *stats, __global const float *mm,
                       __global const float *mv, __global const float *gamma, __global const float *beta,
                       __global float *y)
{
    const int g = get_global_id(0), c0 = g * 8;
    BN_BLOCK((int)get_global_id(1), RPI, R, r0, r1);
    if (c0 >= C || r0 >= R)
        return;
    if (c0 + 8 <= C) {
        const float8 mean = vload8(0, (use_moving ? mm : stats) + c0);
        float8 k = use_moving ? 1.0f / sqrt(vload8(0, mv + c0) + eps) : vload8(0, stats + C + c0);
        if (gamma)
            k *= vload8(0, gamma + c0);
        const float8 sh = beta ? vload8(0, beta + c0) : (float8)(0.0f);
        for (int r = r0; r < r1; r++)
            vstore8((vload8(0, x + (size_t)r * C + c0) - mean) * k + sh, 0, y + (size_t)r * C + c0);
    } else {
        for (int c = c0; c < C; c++) {
            const float mean = use_moving ? mm[c] : stats[c];
            const float k = (use_moving ? 1.0f / sqrt(mv[c] + eps) : stats[C + c]) * (gamma ? gamma[c] : 1.0f);
            const float sh = beta ? beta[c] : 0.0f;
            for (int r = r0; r < r1; r++)
                y[(size_t)r * C + c] = (x[(size_t)r * C + c] - mean) * k + sh;
        }
    }
}

/* Per block b and channel: sum dy into part[b C + c], sum dy (x - mean)
 * into part[(NB + b) C + c]; part = ws + 2 C (ws: bn_bwd_finish's sums).
 * Global (ceil(C / 8), NB). */
__kernel void bn_bwd_part(const int R, const int C, const int RB, const int NB, __global const float *x,
                          __global const float *stats, __global const float *dy, __global float *ws)
{
    const int g = get_global_id(0), b = get_global_id(1), c0 = g * 8;
    __global float *part = ws + 2 * C;
    BN_BLOCK(b, RB, R, r0, r1);
    if (c0 >= C || b >= NB)
        return;
    if (c0 + 8 <= C) {
        const float8 mean = vload8(0, stats + c0);
        float8 s = (float8)(0.0f), sx = (float8)(0.0f);
        for (int r = r0; r < r1; r++) {
            const float8 d = vload8(0, dy + (size_t)r * C + c0);
            s += d;
            sx += d * (vload8(0, x + (size_t)r * C + c0) - mean);
        }
        vstore8(s, 0, part + (size_t)b * C + c0);
        vstore8(sx, 0, part + (size_t)(NB + b) * C + c0);
    } else {
        for (int c = c0; c < C; c++) {
            const float mean = stats[c];
            float s = 0.0f, sx = 0.0f;
            for (int r = r0; r < r1; r++) {
                const float d = dy[(size_t)r * C + c];
                s += d;
                sx += d * (x[(size_t)r * C + c] - mean);
            }
            part[(size_t)b * C + c] = s;
            part[(size_t)(NB + b) * C + c] = sx;
        }
    }
}

/* Per channel, the blocks of bn_bwd_part added in block order: ws[c] = sum
 * dy, ws[C + c] = sum dy * xhat; dgamma / dbeta written when not NULL; the
 * frozen gradients (moving statistics) zeroed when not NULL; with update,
 * the moving statistics take one step m = m * momentum + batch * (1 -
 * momentum) from the saved batch stats. One work item per channel. */
__kernel void bn_bwd_finish(const int C, const int NB, __global const float *stats, __global float *ws,
                            __global float *dgamma, __global float *dbeta, const int update, const float momentum,
                            __global float *mm, __global float *mv, __global float *dmm, __global float *dmv)
{
    const int c = get_global_id(0);
    if (c >= C)
        return;
    __global const float *part = ws + 2 * C;
    float s = 0.0f, sx = 0.0f;
    for (int b = 0; b < NB; b++) {
        s += part[(size_t)b * C + c];
        sx += part[(size_t)(NB + b) * C + c];
    }
    sx *= stats[C + c];
    ws[c] = s;
    ws[C + c] = sx;
    if (dgamma)
        dgamma[c] = sx;
    if (dbeta)
        dbeta[c] = s;
    if (dmm)
        dmm[c] = 0.0f;
    if (dmv)
        dmv[c] = 0.0f;
    if (update) {
        mm[c] = mm[c] * momentum + stats[c] * (1.0f - momentum);
        mv[c] = mv[c] * momentum + stats[2 * C + c] * (1.0f - momentum);
    }
}

/* dx (= or +=) gamma * rstd * (dy - (sum dy + xhat * sum dy xhat) / R).
 * Global (ceil(C / 8), ceil(R / RPI)) as bn_apply. */
__kernel void bn_bwd_dx(const int R, const int C, const int RPI, const int acc, __global const float *x,
                        __global const float *stats, __global const float *gamma, __global const float *ws,
                        __global const float *dy, __global float *dx)
{
    const int g = get_global_id(0), c0 = g * 8;
    BN_BLOCK((int)get_global_id(1), RPI, R, r0, r1);
    if (c0 >= C || r0 >= R)
        return;
    const float invR = 1.0f / (float)R;
    if (c0 + 8 <= C) {
        const float8 mean = vload8(0, stats + c0), rstd = vload8(0, stats + C + c0);
        const float8 k = (gamma ? vload8(0, gamma + c0) : (float8)(1.0f)) * rstd;
        const float8 a = vload8(0, ws + c0) * invR, bx = vload8(0, ws + C + c0) * invR;
        for (int r = r0; r < r1; r++) {
            const size_t i = (size_t)r * C + c0;
            const float8 xhat = (vload8(0, x + i) - mean) * rstd;
            const float8 d = k * (vload8(0, dy + i) - (a + xhat * bx));
            vstore8(acc ? vload8(0, dx + i) + d : d, 0, dx + i);
        }
    } else {
        for (int c = c0; c < C; c++) {
            const float mean = stats[c], rstd = stats[C + c], k = (gamma ? gamma[c] : 1.0f) * rstd;
            const float a = ws[c] * invR, bx = ws[C + c] * invR;
            for (int r = r0; r < r1; r++) {
                const size_t i = (size_t)r * C + c;
                const float d = k * (dy[i] - (a + (x[i] - mean) * rstd * bx));
                dx[i] = acc ? dx[i] + d : d;
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * Concatenation along the last dimension: input i of Ci columns sits at
 * column offset off of the Ct-column output. n = rows * Ci. */
__kernel void concat_fwd(const int n, const int Ci, const int Ct, const int off, __global const float *x,
                         __global float *y)
{
    const int i = get_global_id(0);
    if (i < n)
        y[(i / Ci) * Ct + off + i % Ci] = x[i];
}

/* dx (= or +=) the matching columns of dy; n = rows * Ci. */
__kernel void concat_bwd(const int n, const int acc, const int Ci, const int Ct, const int off,
                         __global const float *dy, __global float *dx)
{
    const int i = get_global_id(0);
    if (i < n) {
        const float d = dy[(i / Ci) * Ct + off + i % Ci];
        dx[i] = acc ? dx[i] + d : d;
    }
}

/* ------------------------------------------------------------------------
 * Batch normalization's moving statistics, once per step over several
 * batches (gradient accumulation's micro-batches, data-parallel ranks): each
 * batch adds its statistics shifted by the moving mean (stable sums) into
 * acc, 3 C floats; the step's end folds them into one update. */

/* acc (= when first, else +=): [0, C) mean - mm, [C, 2C) (mean - mm)^2,
 * [2C, 3C) the batch's biased variance; stats as bn_stats writes them. */
__kernel void bn_moving_acc(const int C, const int first, __global const float *stats, __global const float *mm,
                            __global float *acc)
{
    const int c = get_global_id(0);
    if (c < C) {
        const float d = stats[c] - mm[c], v = stats[2 * C + c];
        acc[c] = first ? d : acc[c] + d;
        acc[C + c] = first ? d * d : acc[C + c] + d * d;
        acc[2 * C + c] = first ? v : acc[2 * C + c] + v;
    }
}

/* From the sums of n equal-sized batches: the combined batch's mean
 * mm + sum d / n and biased variance sum v / n + sum d^2 / n - (sum d / n)^2
 * (the law of total variance), then the one update m = m * momentum + batch
 * * (1 - momentum). */
__kernel void bn_moving_finish(const int C, const float n, const float momentum, __global const float *acc,
                               __global float *mm, __global float *mv)
{
    const int c = get_global_id(0);
    if (c < C) {
        const float dm = acc[c] / n;
        const float var = fmax(acc[2 * C + c] / n + acc[C + c] / n - dm * dm, 0.0f);
        const float mean = mm[c] + dm;
        mm[c] = mm[c] * momentum + mean * (1.0f - momentum);
        mv[c] = mv[c] * momentum + var * (1.0f - momentum);
    }
}

/* ------------------------------------------------------------------------
 * conv12: direct NHWC convolution for CPU-class devices (the native GEMM
 * path; backend/conv_direct.c launches them, layer_conv2d.c picks them).
 * No im2col. Groups 1: the forward and the input gradient hold a register
 * tile of pixels x one or two vectors (cd_vec: float16 on AVX-512-class
 * devices, else float8) of filters / channels: 16 accumulators with 32
 * vector registers, 12 x 1 or 4 x 2 with 16 (CD_QN), the image
 * operand read as a scalar broadcast straight from the NHWC tensor; one
 * FMA body (cd_tile_fma) serves both, specialised per call site for
 * interior tiles (no tests), edge tiles with only the first or the last
 * pixel padded (that pixel left out) and tiles with other padded pixels
 * or a lane tail (tested).
 * The input gradient walks the pixels of one stride phase, so a tap
 * reaches all of a tile or none of it. The weight gradient holds CD_WC
 * channels x one or two vectors of filters, walks fixed chunks of
 * rows one output-row segment at a time (the valid columns computed once
 * per segment) and writes per-chunk partials that conv_wgrad_reduce adds
 * in chunk order. Depthwise: CD_P pixels x 16 channels as two float8.
 * Every sum runs in a fixed order (no atomics), so results are
 * deterministic. One work-item per work-group, as clremat_gemm_cpu.
 * Geometry names as for conv_im2col; F filters, W kernel
 * [KH][KW][C/groups][F]. */
#define CD_P 4

/* Lanes l of [i0, i0+8) below n: p[(i0 + l) / dm], else 0 (depthwise:
 * output channel f reads input channel f / dm). */
float8 cd_gather8(__global const float *p, const int i0, const int n, const int dm)
{
    float t[8];
    if (dm == 1)
        return clremat_load8(p, i0, n);
    for (int j = 0; j < 8; j++)
        t[j] = i0 + j < n ? p[(i0 + j) / dm] : 0.0f;
    return vload8(0, t);
}

/* Lanes l of [i0, i0+8) below n: p[(i0 + l) * s + o], else 0. */
float8 cd_strided8(__global const float *p, const int i0, const int n, const int s, const int o)
{
    float t[8];
    if (s == 1 && o == 0)
        return clremat_load8(p, i0, n);
    for (int j = 0; j < 8; j++)
        t[j] = i0 + j < n ? p[(i0 + j) * s + o] : 0.0f;
    return vload8(0, t);
}

/* Forward epilogue of one pixel: pre = acc (+ bias), out = act(pre) on
 * that float (clremat_act8, as the recompute kernel). */
void cd_store_out(__global float *pre, __global float *out, const long idx, const int nf, const int use_bias,
                  const int act, const float8 b0, const float8 b1, float8 v0, float8 v1)
{
    if (use_bias) {
        v0 += b0;
        v1 += b1;
    }
    clremat_store8(pre + idx, 0, nf, v0);
    clremat_store8(pre + idx, 8, nf, v1);
    if (act != CLREMAT_ACT_NONE) {
        clremat_store8(out + idx, 0, nf, clremat_act8(act, v0));
        clremat_store8(out + idx, 8, nf, clremat_act8(act, v1));
    }
}

/* The vector of the register tiles below: float16 where the native GEMM's
 * tile is 12 x 32 (AVX-512-class devices; backend/program.c picks GC_NR
 * from the device's native float vector width), float8 otherwise. The host
 * (conv_direct.c) derives the same width from the context's tile. */
#if GC_NR >= 32
#define CD_VW 16
typedef float16 cd_vec;
#define cd_vload vload16
#else
#define CD_VW 8
typedef float8 cd_vec;
#define cd_vload vload8
#endif
/* Pixels of a forward / input-gradient register tile of nv vectors: 16
 * accumulators where the device has 32 vector registers (AVX-512); where
 * it has 16 (AVX2), 12 x one vector or 4 x two (16 spilled the tile to the
 * stack; 4 x 2 measured faster than 6 x 2 in bench/conv_bench, alternating
 * runs, and divides the widths 8, 16, 32 of CIFAR-sized images). The tile arrays are
 * declared [16][2] and indexed only by constants (CD_EACH16 below), so the
 * accumulators are promoted to registers whatever the compiler's unrolling
 * heuristics. */
#if CD_VW == 16
#define CD_QN(nv) ((nv) == 1 ? 16 : 8)
#else
#define CD_QN(nv) ((nv) == 1 ? 12 : 4)
#endif
/* S(p) for p = 0, 1, ..., 15: the tile's per-pixel statements written out
 * (each guarded by a constant test against CD_QN). */
#define CD_EACH16(S) S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11) S(12) S(13) S(14) S(15)
/* The loops without edge tests (modes 0, 2, 3 below) are compiled as extra
 * copies of the tile loops where the host asks for them (-DCD_SPECIALISE=1,
 * backend/program.c: every device but Mesa's, whose llvmpipe builds them
 * slowly); elsewhere every tile takes the tested loop, the same
 * arithmetic. On AVX2 the copies made the forward and input gradient
 * about twice as fast (bench/conv_bench). */
#ifndef CD_SPECIALISE
#define CD_SPECIALISE (CD_VW == 16)
#endif
/* The tile helpers take constant tile sizes and modes from their callers:
 * inlined, each call site becomes its own loop with the tile in registers. */
#define CD_INLINE inline __attribute__((always_inline))

/* Elements [i0, i0 + CD_VW) of p, those from n on read as 0. */
cd_vec cd_loadv(__global const float *p, const int i0, const int n)
{
#if CD_VW == 16
    if (i0 + 16 <= n)
        return vload16(0, p + i0);
    return (float16)(clremat_load8(p, i0, n), clremat_load8(p, i0 + 8, n));
#else
    return clremat_load8(p, i0, n);
#endif
}

/* Stores elements [i0, i0 + CD_VW) of v into p, none from n on. */
void cd_storev(__global float *p, const int i0, const int n, const cd_vec v)
{
#if CD_VW == 16
    if (i0 + 16 <= n) {
        vstore16(v, 0, p + i0);
        return;
    }
    clremat_store8(p, i0, n, v.lo);
    clremat_store8(p, i0 + 8, n, v.hi);
#else
    clremat_store8(p, i0, n, v);
#endif
}

/* The FMA body of the forward and the input gradient over J taps of K
 * each: acc[p][v] += a_p[j aj + k] * b[j K + k][v CD_VW ..] for j = 0, 1,
 * ..., J - 1 and k = 0, 1, ..., K - 1 in that order, where pixel p's
 * operand row a_p is a + (p - lo) * as for lo <= p < hi (the other pixels
 * add 0 * b, as padding does) and b's row i is b + i * ldb (J > 1: the
 * taps of one kernel row whose pixels are all inside the image, in one
 * call). mode 0: lo = 0, hi = CD_QN(nv), all nv * CD_VW lanes of b valid
 * (no test in the loop); 1: pixels tested and lanes from nb on read as 0;
 * 2 and 3: all lanes valid and the first (2: lo = 1, hi = CD_QN(nv)) or
 * the last pixel (3: lo = 0, hi = CD_QN(nv) - 1) outside the image, the
 * tiles at the left and right edge of a row under "same" padding: that
 * pixel's FMAs are left out (adding 0 * b to an accumulator, which starts
 * at +0 and so is never -0, leaves it unchanged for finite b: the sums are
 * those of mode 1). Callers pass constant nv and mode, so each call
 * compiles to its own loop; the arithmetic is the same in all. */
CD_INLINE void cd_tile_fma(cd_vec acc[16][2], const int nv, const int mode, __global const float *a,
                           const int as, const int lo, const int hi, __global const float *b, const int ldb,
                           const int nb, const int K, const int J, const long aj)
{
    __global const float *ap[16];
    int ok[16];
#define CD_TILE_ROW(p)                                                                                             \
    if (p < CD_QN(nv)) {                                                                                           \
        ok[p] = mode != 1 || (p >= lo && p < hi);                                                                  \
        ap[p] = a + (long)(mode == 0 || mode == 3 ? p : mode == 2 ? p - 1 : clamp(p, lo, hi - 1) - lo) * as;       \
    }
    CD_EACH16(CD_TILE_ROW)
#undef CD_TILE_ROW
    for (int j = 0; j < J; j++) {
        for (long k = j * aj, ke = k + K; k < ke; k++, b += ldb) {
            const cd_vec b0 = mode == 1 ? cd_loadv(b, 0, nb) : cd_vload(0, b);
            const cd_vec b1 = nv == 1 ? (cd_vec)(0.0f) : mode == 1 ? cd_loadv(b, CD_VW, nb) : cd_vload(1, b);
#define CD_TILE_FMA(p)                                                                                             \
    if (p < CD_QN(nv) && !((mode == 2 && p == 0) || (mode == 3 && p == CD_QN(nv) - 1))) {                          \
        const float v = mode != 1 ? ap[p][k] : ok[p] ? ap[p][k] : 0.0f;                                            \
        acc[p][0] = CLREMAT_FMA((cd_vec)(v), b0, acc[p][0]);                                                       \
        if (nv == 2)                                                                                               \
            acc[p][1] = CLREMAT_FMA((cd_vec)(v), b1, acc[p][1]);                                                   \
    }
            CD_EACH16(CD_TILE_FMA)
#undef CD_TILE_FMA
        }
    }
}

/* cd_tile_fma with the mode chosen from the pixel range and the lanes. */
CD_INLINE void cd_tile_tap(cd_vec acc[16][2], const int nv, __global const float *a, const int as, const int lo,
                           const int hi, __global const float *b, const int ldb, const int nb, const int K,
                           const int J, const long aj)
{
    if (!CD_SPECIALISE || nb < nv * CD_VW)
        cd_tile_fma(acc, nv, 1, a, as, lo, hi, b, ldb, nb, K, J, aj);
    else if (lo == 0 && hi == CD_QN(nv))
        cd_tile_fma(acc, nv, 0, a, as, lo, hi, b, ldb, nb, K, J, aj);
    else if (lo == 1 && hi == CD_QN(nv))
        cd_tile_fma(acc, nv, 2, a, as, lo, hi, b, ldb, nb, K, J, aj);
    else if (lo == 0 && hi == CD_QN(nv) - 1)
        cd_tile_fma(acc, nv, 3, a, as, lo, hi, b, ldb, nb, K, J, aj);
    else
        cd_tile_fma(acc, nv, 1, a, as, lo, hi, b, ldb, nb, K, J, aj);
}

/* act of a cd_vec, through clremat_act8 on each eight-lane part (the bits
 * of the recompute kernel, clremat_act_fwd8). */
cd_vec cd_act(const int act, const cd_vec v)
{
#if CD_VW == 16
    return (float16)(clremat_act8(act, v.lo), clremat_act8(act, v.hi));
#else
    return clremat_act8(act, v);
#endif
}

/* Stores pixels [p0, np) of a forward tile (stride F apart from pre / out):
 * pre = acc (+ bias), out = act(pre) on that float (clremat_act8, as the
 * recompute kernel). The tile is copied once into a private array and
 * stored by a rolled loop: one copy of the masked-store and activation
 * code instead of one per pixel and vector. */
CD_INLINE void cd_fwd_store(cd_vec acc[16][2], const int nv, const int p0, const int np, const int F, const int nf,
                            const int use_bias, const int act, const cd_vec bias0, const cd_vec bias1,
                            __global float *pre, __global float *out)
{
    cd_vec st[16][2];
#pragma unroll
    for (int p = 0; p < 16; p++) {
        st[p][0] = acc[p][0];
        st[p][1] = acc[p][1];
    }
#pragma unroll 1
    for (int i = p0 * nv; i < np * nv; i++) {
        const int p = i / nv, v = i % nv, n = nf - v * CD_VW;
        const long idx = (long)p * F + v * CD_VW;
        cd_vec s = st[p][v];
        if (use_bias)
            s += v ? bias1 : bias0;
        cd_storev(pre + idx, 0, n, s);
        if (act != CLREMAT_ACT_NONE)
            cd_storev(out + idx, 0, n, cd_act(act, s));
    }
}

/* Stores pixels [p0, np) of an input-gradient tile (ps floats apart from d):
 * d = a, or with acc d += a; rolled as cd_fwd_store. */
CD_INLINE void cd_bwd_store(cd_vec a[16][2], const int nv, const int p0, const int np, const int ps, const int nc,
                            const int acc,
                            __global float *d)
{
    cd_vec st[16][2];
#pragma unroll
    for (int p = 0; p < 16; p++) {
        st[p][0] = a[p][0];
        st[p][1] = a[p][1];
    }
#pragma unroll 1
    for (int i = p0 * nv; i < np * nv; i++) {
        const int p = i / nv, v = i % nv, n = nc - v * CD_VW;
        __global float *q = d + (long)p * ps + v * CD_VW;
        cd_vec s = st[p][v];
        if (acc)
            s += cd_loadv(q, 0, n);
        cd_storev(q, 0, n, s);
    }
}

/* The first pixel of the tile that covers pixels [i0, min(i0 + q, n)) of
 * a row of n: i0, or n - q for a last tile shorter than q in a row of at
 * least q, which then overlaps its predecessor (the overlapped pixels are
 * computed twice, the same sums, and stored once) so that it takes the
 * whole-tile loops instead of the tested one. */
int cd_tile_start(const int i0, const int q, const int n) { return i0 + q > n && n >= q ? n - q : i0; }

/* One output row of the forward (filters [f0, f0 + nv CD_VW)): tiles of
 * CD_QN(nv) pixels, each summing over (kh, kw, c) in that order. */
CD_INLINE void cd_fwd_row(const int nv, const int H, const int W, const int C, const int OW, const int KH,
                          const int KW, const int SW, const int DH, const int DW, const int PW, const int F,
                          const int f0, const int ih0, __global const float *ximg, __global const float *w,
                          const cd_vec bias0, const cd_vec bias1, const int use_bias, const int act,
                          __global float *pre, __global float *out)
{
    const int nf = F - f0;
    for (int t = 0; t < OW; t += CD_QN(nv)) {
        const int ow0 = cd_tile_start(t, CD_QN(nv), OW);
        cd_vec acc[16][2];
#pragma unroll
        for (int p = 0; p < 16; p++)
            acc[p][0] = acc[p][1] = (cd_vec)(0.0f);
        /* every tap of a kernel row reaches every pixel of a whole tile:
         * one call per kernel row */
        const int inner = ow0 + CD_QN(nv) <= OW && ow0 * SW - PW >= 0 &&
                          (ow0 + CD_QN(nv) - 1) * SW - PW + (KW - 1) * DW < W;
        for (int kh = 0; kh < KH; kh++) {
            const int ih = ih0 + kh * DH;
            if (ih < 0 || ih >= H)
                continue;
            if (inner) {
                cd_tile_tap(acc, nv, ximg + ((long)ih * W + ow0 * SW - PW) * C, SW * C, 0, CD_QN(nv),
                            w + (long)kh * KW * C * F + f0, F, nf, C, KW, (long)DW * C);
                continue;
            }
            for (int kw = 0; kw < KW; kw++) {
                /* pixel p reads column i0 + p SW: those inside [0, W) */
                const int i0 = ow0 * SW - PW + kw * DW;
                int lo = 0, hi = min(CD_QN(nv), OW - ow0);
                while (lo < hi && i0 + lo * SW < 0)
                    lo++;
                while (hi > lo && i0 + (hi - 1) * SW >= W)
                    hi--;
                if (lo < hi)
                    cd_tile_tap(acc, nv, ximg + ((long)ih * W + i0 + lo * SW) * C, SW * C, lo, hi,
                                w + (long)(kh * KW + kw) * C * F + f0, F, nf, C, 1, 0);
            }
        }
        cd_fwd_store(acc, nv, t - ow0, min(CD_QN(nv), OW - ow0), F, nf, use_bias, act, bias0, bias1,
                     pre + (long)ow0 * F + f0, out + (long)ow0 * F + f0);
    }
}

/* Forward, one group. Work-item (filters [nv CD_VW t, nv CD_VW (t + 1)),
 * row r = b * OH + oh); nv = 1 or 2 vectors of filters (the host picks 1
 * when F fits one vector). pre = sum (+ bias), out = act(pre) on that
 * float. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void conv_fwd_direct(const int H, const int W, const int C, const int OH, const int OW, const int KH, const int KW,
                     const int SH, const int SW, const int DH, const int DW, const int PH, const int PW,
                     const int F, const int nv, const int use_bias, const int act, __global const float *x,
                     __global const float *w, __global const float *bias, __global float *pre,
                     __global float *out)
{
    const int f0 = get_global_id(0) * nv * CD_VW, r = get_global_id(1);
    const int oh = r % OH, b = r / OH;
    const cd_vec b0 = use_bias ? cd_loadv(bias, f0, F) : (cd_vec)(0.0f);
    const cd_vec b1 = use_bias && nv == 2 ? cd_loadv(bias, f0 + CD_VW, F) : (cd_vec)(0.0f);
    __global const float *ximg = x + (long)b * H * W * C;
    const long orow = (long)r * OW * F;
    if (nv == 1)
        cd_fwd_row(1, H, W, C, OW, KH, KW, SW, DH, DW, PW, F, f0, oh * SH - PH, ximg, w, b0, b1, use_bias, act,
                   pre + orow, out + orow);
    else
        cd_fwd_row(2, H, W, C, OW, KH, KW, SW, DH, DW, PW, F, f0, oh * SH - PH, ximg, w, b0, b1, use_bias, act,
                   pre + orow, out + orow);
}

/* wt[tap][f][c] = w[tap][c][f] (the input gradient reads W^T rows). */
__kernel void conv_wt_transpose(const int n, const int C, const int F, __global const float *w,
                                __global float *wt)
{
    const int i = get_global_id(0);
    if (i < n) {
        const int c = i % C, t = i / C, f = t % F, tap = t / F;
        wt[i] = w[((long)tap * C + c) * F + f];
    }
}

/* One tile row of the input gradient: pixels iw = ph + SW (j0 + p) of
 * input row ih (one phase of the stride: for a tap kw either all of them
 * are reached or none, so no per-pixel stride test), channels [c0, c0 + nv
 * CD_VW). Sums over the taps (kh, kw) reaching the pixels, then f, in that
 * order, of dz[oh, ow, f] wt[tap][f][c]. */
CD_INLINE void cd_bwd_row(const int nv, const int W, const int C, const int OH, const int OW, const int KH,
                          const int KW, const int SH, const int SW, const int DH, const int DW, const int PH,
                          const int PW, const int F, const int acc, const int c0, const int ih, const int ph,
                          __global const float *dzimg, __global const float *wt, __global float *dxrow)
{
    const int nc = C - c0, nj = (W - ph + SW - 1) / SW;
    for (int t = 0; t < nj; t += CD_QN(nv)) {
        const int j0 = cd_tile_start(t, CD_QN(nv), nj);
        cd_vec a[16][2];
#pragma unroll
        for (int p = 0; p < 16; p++)
            a[p][0] = a[p][1] = (cd_vec)(0.0f);
        /* stride 1 and every tap of a kernel row reaching every pixel of a
         * whole tile: one call per kernel row, the operand row of tap kw
         * DW kw pixels before that of tap 0 */
        const int ow00 = j0 + PW;
        const int inner = SW == 1 && j0 + CD_QN(nv) <= nj && ow00 - (KW - 1) * DW >= 0 && ow00 + CD_QN(nv) <= OW;
        for (int kh = 0; kh < KH; kh++) {
            const int th = ih + PH - kh * DH;
            if (th < 0 || th % SH != 0 || th / SH >= OH)
                continue;
            if (inner) {
                cd_tile_tap(a, nv, dzimg + ((long)(th / SH) * OW + ow00) * F, F, 0, CD_QN(nv),
                            wt + (long)kh * KW * F * C + c0, C, nc, F, KW, -(long)DW * F);
                continue;
            }
            for (int kw = 0; kw < KW; kw++) {
                /* pixel p is reached from output column ow0 + p */
                const int t0 = ph + SW * j0 + PW - kw * DW;
                if ((t0 % SW + SW) % SW != 0)
                    continue;
                const int ow0 = t0 / SW; /* exact */
                const int lo = max(0, -ow0), hi = min(min(CD_QN(nv), nj - j0), OW - ow0);
                if (lo < hi)
                    cd_tile_tap(a, nv, dzimg + ((long)(th / SH) * OW + ow0 + lo) * F, F, lo, hi,
                                wt + (long)(kh * KW + kw) * F * C + c0, C, nc, F, 1, 0);
            }
        }
        cd_bwd_store(a, nv, t - j0, min(CD_QN(nv), nj - j0), SW * C, nc, acc,
                     dxrow + (long)(ph + SW * j0) * C + c0);
    }
}

/* Input gradient, one group. Work-item (channels [nv CD_VW t, nv CD_VW (t
 * + 1)), (b * H + ih) * SW + phase); nv as for the forward. wt: the kernel
 * as [tap][F][C] (conv_wt_transpose). acc: dx +=. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void conv_bwd_data_direct(const int H, const int W, const int C, const int OH, const int OW, const int KH,
                          const int KW, const int SH, const int SW, const int DH, const int DW, const int PH,
                          const int PW, const int F, const int nv, const int acc, __global const float *dz,
                          __global const float *wt, __global float *dx)
{
    const int c0 = get_global_id(0) * nv * CD_VW, r = get_global_id(1);
    const int ph = r % SW, row = r / SW, ih = row % H, b = row / H;
    __global const float *dzimg = dz + (long)b * OH * OW * F;
    __global float *dxrow = dx + (long)row * W * C;
    if (ph >= W)
        return;
    if (nv == 1)
        cd_bwd_row(1, W, C, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW, F, acc, c0, ih, ph, dzimg, wt, dxrow);
    else
        cd_bwd_row(2, W, C, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW, F, acc, c0, ih, ph, dzimg, wt, dxrow);
}

/* Channels of a weight-gradient work-item, nv vectors of filters each: 16
 * accumulators where the device has 32 vector registers; where it has 16,
 * 12 x one vector or 4 x two (as CD_QN; backend/conv_direct.c launches the
 * same count). */
#if CD_VW == 16
#define CD_WC(nv) (16 / (nv))
#else
#define CD_WC(nv) ((nv) == 1 ? 12 : 4)
#endif

/* The FMA body of the weight gradient over n consecutive output pixels of
 * one row: acc[c][v] += x_i[c] * dz_i[v CD_VW ..] for i = 0, 1, ..., n - 1
 * in that order, x_i = xp + i * xs, dz_i = dp + i * F, for CD_WC(nv)
 * channels (each a scalar broadcast) x nv vectors of filters. mode 0:
 * every channel and filter valid; 1: channels from nc on and filters from
 * nf on read as 0. The per-channel statements are written out (CD_EACH16),
 * so the accumulators stay in registers. */
CD_INLINE void cd_wgrad_fma(cd_vec acc[16][2], const int nv, const int mode, __global const float *xp,
                            const int xs, __global const float *dp, const int F, const int n, const int nc,
                            const int nf)
{
    for (int i = 0; i < n; i++, xp += xs, dp += F) {
        const cd_vec d0 = mode ? cd_loadv(dp, 0, nf) : cd_vload(0, dp);
        const cd_vec d1 = nv == 1 ? (cd_vec)(0.0f) : mode ? cd_loadv(dp, CD_VW, nf) : cd_vload(1, dp);
#define CD_WG(c)                                                                                                   \
    if (c < CD_WC(nv)) {                                                                                           \
        const float v = mode && c >= nc ? 0.0f : xp[c];                                                            \
        acc[c][0] = CLREMAT_FMA((cd_vec)(v), d0, acc[c][0]);                                                       \
        if (nv == 2)                                                                                               \
            acc[c][1] = CLREMAT_FMA((cd_vec)(v), d1, acc[c][1]);                                                   \
    }
        CD_EACH16(CD_WG)
#undef CD_WG
    }
}

/* Partial sums of one chunk of rows [r0, r1) for tap (kh, kw), channels
 * [c0, c0 + CD_WC(nv)) x filters [f0, f0 + nv CD_VW): the rows in order,
 * walked one output row segment at a time with its valid columns computed
 * once; o: the partial of channel c0, filter f0. Channels below c0 + s0
 * belong to the previous work-item (cd_tile_start) and are not stored. */
CD_INLINE void cd_wgrad_chunk(const int nv, const int r0, const int r1, const int H, const int W, const int C,
                              const int OH, const int OW, const int kh, const int kw, const int SH, const int SW,
                              const int DH, const int DW, const int PH, const int PW, const int F, const int c0,
                              const int s0, const int f0, __global const float *x, __global const float *dz,
                              __global float *o)
{
    const int cc = CD_WC(nv), nc = min(cc, C - c0), nf = F - f0;
    const int mode = !CD_SPECIALISE || nc < cc || nf < nv * CD_VW;
    cd_vec a[16][2];
#pragma unroll
    for (int c = 0; c < 16; c++)
        a[c][0] = a[c][1] = (cd_vec)(0.0f);
    /* row r = (bi, oh, ow): divided out once, then stepped one segment
     * (the rest of an output row) at a time */
    int ow = r0 % OW, oh = (r0 / OW) % OH, bi = r0 / (OW * OH);
    for (int r = r0; r < r1;) {
        const int n = min(OW - ow, r1 - r);
        const int ih = oh * SH - PH + kh * DH, i0 = kw * DW - PW; /* column read by output column 0 */
        if (ih >= 0 && ih < H) {
            int lo = ow, hi = ow + n;
            while (lo < hi && i0 + lo * SW < 0)
                lo++;
            while (hi > lo && i0 + (hi - 1) * SW >= W)
                hi--;
            if (lo < hi) {
                __global const float *xp = x + ((long)(bi * H + ih) * W + i0 + lo * SW) * C + c0;
                __global const float *dp = dz + (long)(r - ow + lo) * F + f0;
                if (mode)
                    cd_wgrad_fma(a, nv, 1, xp, SW * C, dp, F, hi - lo, nc, nf);
                else
                    cd_wgrad_fma(a, nv, 0, xp, SW * C, dp, F, hi - lo, nc, nf);
            }
        }
        r += n;
        ow = 0;
        if (++oh == OH) {
            oh = 0;
            bi++;
        }
    }
#define CD_WG_STORE(c)                                                                                             \
    if (c < CD_WC(nv) && c >= s0 && c < nc) {                                                                      \
        cd_storev(o + (long)c * F, 0, nf, a[c][0]);                                                                \
        if (nv == 2)                                                                                               \
            cd_storev(o + (long)c * F, CD_VW, nf, a[c][1]);                                                        \
    }
    CD_EACH16(CD_WG_STORE)
#undef CD_WG_STORE
}

/* Weight gradient, one group: partial sums over rows [ch * RC, ch * RC +
 * RC) (rows r = (b, oh, ow) in order) of x[pixel the tap reads][c] dz[r][f]
 * for CD_WC(nv) channels x nv CD_VW filters of tap (kh, kw): the channel
 * block ct starts at ct CD_WC(nv), or for a last block shorter than that
 * at C - CD_WC(nv) (cd_tile_start: it then takes the whole-tile loops and
 * stores only its own channels). Work-item (ft + NFT * ct, tap, ch);
 * part[ch][tap][c][f]. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void conv_wgrad_direct(const int rows, const int RC, const int H, const int W, const int C, const int OH,
                       const int OW, const int KW, const int SH, const int SW, const int DH, const int DW,
                       const int PH, const int PW, const int F, const int nv, const long KF,
                       __global const float *x, __global const float *dz, __global float *part)
{
    const int nft = (F + nv * CD_VW - 1) / (nv * CD_VW), cc = CD_WC(nv);
    const int ft = get_global_id(0) % nft, ct = get_global_id(0) / nft;
    const int tap = get_global_id(1), ch = get_global_id(2);
    const int kh = tap / KW, kw = tap % KW, r0 = ch * RC, r1 = min(rows, r0 + RC);
    const int f0 = ft * nv * CD_VW, c0 = cd_tile_start(ct * cc, cc, C);
    __global float *o = part + ch * KF + ((long)tap * C + c0) * F + f0;
    if (nv == 1)
        cd_wgrad_chunk(1, r0, r1, H, W, C, OH, OW, kh, kw, SH, SW, DH, DW, PH, PW, F, c0, ct * cc - c0, f0, x,
                       dz, o);
    else
        cd_wgrad_chunk(2, r0, r1, H, W, C, OH, OW, kh, kw, SH, SW, DH, DW, PH, PW, F, c0, ct * cc - c0, f0, x,
                       dz, o);
}

/* g[i] = sum over chunks ch = 0, 1, ... of part[ch * KF + i], in that
 * order; eight per work-item (launch ceil(KF / 8)). */
__kernel void conv_wgrad_reduce(const long KF, const int nch, __global const float *part, __global float *g)
{
    const long i0 = (long)get_global_id(0) * 8;
    if (i0 < KF) {
        const int n = (int)min(8L, KF - i0);
        float8 s = clremat_load8(part + i0, 0, n);
        for (int ch = 1; ch < nch; ch++)
            s += clremat_load8(part + ch * KF + i0, 0, n);
        clremat_store8(g + i0, 0, n, s);
    }
}

/* Depthwise forward (groups = C, F = C * dm, W [KH][KW][1][F]). Work-item
 * (filters [16 t, 16 t + 16), row r = b * OH + oh); sums over (kh, kw). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void conv_dw_fwd(const int H, const int W, const int C, const int OH, const int OW, const int KH, const int KW,
                 const int SH, const int SW, const int DH, const int DW, const int PH, const int PW, const int F,
                 const int dm, const int use_bias, const int act, __global const float *x,
                 __global const float *w, __global const float *bias, __global float *pre, __global float *out)
{
    const int f0 = get_global_id(0) * 16, r = get_global_id(1);
    const int nf = min(16, F - f0), oh = r % OH, b = r / OH;
    const float8 b0 = use_bias ? clremat_load8(bias, f0, F) : (float8)(0.0f);
    const float8 b1 = use_bias ? clremat_load8(bias, f0 + 8, F) : (float8)(0.0f);
    for (int ow0 = 0; ow0 < OW; ow0 += CD_P) {
        float8 a0[CD_P], a1[CD_P];
#pragma unroll
        for (int p = 0; p < CD_P; p++)
            a0[p] = a1[p] = (float8)(0.0f);
        for (int kh = 0; kh < KH; kh++) {
            const int ih = oh * SH - PH + kh * DH;
            if (ih < 0 || ih >= H)
                continue;
            __global const float *xrow = x + (long)(b * H + ih) * W * C;
            for (int kw = 0; kw < KW; kw++) {
                __global const float *wp = w + (long)(kh * KW + kw) * F;
                const float8 w0 = clremat_load8(wp, f0, F), w1 = clremat_load8(wp, f0 + 8, F);
#pragma unroll
                for (int p = 0; p < CD_P; p++) {
                    const int iw = (ow0 + p) * SW - PW + kw * DW;
                    if (ow0 + p < OW && iw >= 0 && iw < W) {
                        __global const float *xp = xrow + (long)iw * C;
                        a0[p] = CLREMAT_FMA(cd_gather8(xp, f0, F, dm), w0, a0[p]);
                        a1[p] = CLREMAT_FMA(cd_gather8(xp, f0 + 8, F, dm), w1, a1[p]);
                    }
                }
            }
        }
#pragma unroll
        for (int p = 0; p < CD_P; p++) /* constant indices: the tile stays in registers */
            if (ow0 + p < OW)
                cd_store_out(pre, out, ((long)r * OW + ow0 + p) * F + f0, nf, use_bias, act, b0, b1, a0[p], a1[p]);
    }
}

/* Depthwise input gradient. Work-item (channels [16 t, 16 t + 16), row r =
 * b * H + ih): dx[c] = sum over taps reaching the pixel, then m < dm, of
 * dz[oh, ow, c dm + m] w[tap][c dm + m]. acc: dx +=. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void conv_dw_bwd_data(const int H, const int W, const int C, const int OH, const int OW, const int KH, const int KW,
                      const int SH, const int SW, const int DH, const int DW, const int PH, const int PW,
                      const int F, const int dm, const int acc, __global const float *dz,
                      __global const float *w, __global float *dx)
{
    const int c0 = get_global_id(0) * 16, r = get_global_id(1);
    const int nc = min(16, C - c0), ih = r % H, b = r / H;
    for (int iw0 = 0; iw0 < W; iw0 += CD_P) {
        float8 a0[CD_P], a1[CD_P];
#pragma unroll
        for (int p = 0; p < CD_P; p++)
            a0[p] = a1[p] = (float8)(0.0f);
        for (int kh = 0; kh < KH; kh++) {
            const int th = ih + PH - kh * DH;
            if (th < 0 || th % SH != 0 || th / SH >= OH)
                continue;
            __global const float *drow = dz + (long)(b * OH + th / SH) * OW * F;
            for (int kw = 0; kw < KW; kw++) {
                __global const float *wp = w + (long)(kh * KW + kw) * F;
                for (int m = 0; m < dm; m++) {
                    const float8 w0 = cd_strided8(wp, c0, C, dm, m), w1 = cd_strided8(wp, c0 + 8, C, dm, m);
#pragma unroll
                    for (int p = 0; p < CD_P; p++) {
                        const int tw = iw0 + p + PW - kw * DW;
                        if (iw0 + p < W && tw >= 0 && tw % SW == 0 && tw / SW < OW) {
                            __global const float *dp = drow + (long)(tw / SW) * F;
                            a0[p] = CLREMAT_FMA(cd_strided8(dp, c0, C, dm, m), w0, a0[p]);
                            a1[p] = CLREMAT_FMA(cd_strided8(dp, c0 + 8, C, dm, m), w1, a1[p]);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int p = 0; p < CD_P; p++) {
            if (iw0 + p >= W)
                break;
            __global float *d = dx + ((long)r * W + iw0 + p) * C + c0;
            if (acc) {
                a0[p] += clremat_load8(d, 0, nc);
                a1[p] += clremat_load8(d, 8, nc);
            }
            clremat_store8(d, 0, nc, a0[p]);
            clremat_store8(d, 8, nc, a1[p]);
        }
    }
}

/* Depthwise weight gradient: partial sums over rows [ch * RC, ch * RC +
 * RC) of x[pixel the tap reads][f / dm] dz[r][f] for filters [16 t, 16 t +
 * 16) of one tap. Work-item (t, tap, ch); part[ch][tap][f]. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void conv_dw_wgrad(const int rows, const int RC, const int H, const int W, const int C, const int OH,
                   const int OW, const int KW, const int SH, const int SW, const int DH, const int DW,
                   const int PH, const int PW, const int F, const int dm, const long KF,
                   __global const float *x, __global const float *dz, __global float *part)
{
    const int f0 = get_global_id(0) * 16, tap = get_global_id(1), ch = get_global_id(2);
    const int kh = tap / KW, kw = tap % KW;
    const int r0 = ch * RC, r1 = min(rows, r0 + RC);
    float8 a0 = (float8)(0.0f), a1 = (float8)(0.0f);
    int ow = r0 % OW, oh = (r0 / OW) % OH, b = r0 / (OW * OH);
    for (int r = r0; r < r1; r++) {
        const int ih = oh * SH - PH + kh * DH, iw = ow * SW - PW + kw * DW;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
            __global const float *xp = x + ((long)(b * H + ih) * W + iw) * C;
            __global const float *dp = dz + (long)r * F;
            a0 = CLREMAT_FMA(cd_gather8(xp, f0, F, dm), clremat_load8(dp, f0, F), a0);
            a1 = CLREMAT_FMA(cd_gather8(xp, f0 + 8, F, dm), clremat_load8(dp, f0 + 8, F), a1);
        }
        if (++ow == OW) {
            ow = 0;
            if (++oh == OH) {
                oh = 0;
                b++;
            }
        }
    }
    clremat_store8(part + ch * KF + (long)tap * F, f0, F, a0);
    clremat_store8(part + ch * KF + (long)tap * F, f0 + 8, F, a1);
}

/* ------------------------------------------------------------------------
 * Mixed precision (issue 16): the conversions and the layers' 16-bit
 * launches (the storage helpers clremat_ld16 / clremat_st16 are above the
 * layer kernels, which share bodies with their 16-bit forms). */

/* v *= s, skipped where s is 1: the same value for every number, and a
 * NaN keeps its sign and payload through a plain conversion (NVIDIA's
 * multiply returns the canonical NaN 0x7fffffff whatever its operand, so a
 * negative NaN became a positive one in bfloat16). Every 16-bit kernel that
 * scales what it stores (the conversions, ce_backward16's loss-scaled
 * gradient) scales through it, so they agree bit for bit with each other. */
#define CLREMAT_SCALE_BY(v, s) \
    do {                       \
        if ((s) != 1.0f)       \
            (v) *= (s);        \
    } while (0)

/* dst[i] = store(dfmt, act(load(sfmt, src[i])) * scale) (acc: added to
 * dst[i]'s value, in float32, before the store); act 0 is the identity. The
 * conversion at a layer boundary, the activation recompute of the mixed
 * path (the same kernel writes an activation output in the forward and in
 * a recompute, so both round alike) and the loss-scaled gradient. */
__kernel void clremat_cvt16(const int n, const int act, const float scale, const int acc, const int sfmt,
                            __global const uchar *src, const int dfmt, __global uchar *dst)
{
    const int i = get_global_id(0);
    if (i < n) {
        float v = clremat_ld16(src, sfmt, i);
        if (act)
            v = clremat_act1(act, v);
        CLREMAT_SCALE_BY(v, scale);
        if (acc)
            v = clremat_ld16(dst, dfmt, i) + v;
        clremat_st16(dst, dfmt, i, v);
    }
}

/* ======================================================================
 * Column sums: the bias gradient db[c] = sum over r of dZ[off + r * ld + c],
 * r in order, summed in float32 whatever dZ's format (fmt: 0 float32, 1
 * binary16, 2 bfloat16, widened exactly on load), stored (clremat_colsum8,
 * clremat_colsum8_16: dense, conv2d, attention's projections) or consumed
 * at once by the optimizer update of the bias and its states
 * (clremat_colsum8_upd, clremat_colsum8_upd16: dZ dense, ld = cols; the
 * gradient is never stored). A work-item sums `blocks` (1 to 8) blocks of
 * eight columns from c0 = id * 8 * blocks (launch ceil(cols / (8 *
 * blocks))), walking the rows once with one float8 accumulator a block;
 * backend/colsum.c chooses blocks per device and shape (on CPUs up to 8,
 * 64 columns a walk instead of 8, as long as every compute unit gets an
 * item; 1 on GPUs, where neighbouring items read neighbouring bytes). Each
 * column's sum adds the same floats in the same order whatever blocks is:
 * the same bits on every path, fused or stored.
 * ====================================================================== */
#define CLREMAT_COLSUM_WIDE 8

inline float8 clremat_colsum_ld8(__global const uchar *x, const int fmt, const long i)
{
    return fmt ? gc16_ld8(x, fmt, i) : vload8(0, (__global const float *)x + i);
}

/* The sums of the nb (0 to 8) whole blocks of eight columns from c0 into
 * s[0..nb), each starting from 0 or, with `from` (not NULL), from its
 * value there: a launch over the next rows continues the sums of the
 * launch before (the launcher splits the rows on a device with a loop
 * budget, loop_budget.h), the same floats added in the same order. The
 * tests of nb are the same for every row: predicted branches on a CPU,
 * uniform ones on a GPU. */
inline void clremat_colsum_blocks(const int rows, const int ld, const long off, const int fmt,
                                  __global const uchar *x, const int c0, const int nb, float8 *s,
                                  __global const float *from)
{
    float8 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
    if (from) {
        const __global float *f = from + c0;
        a0 = nb > 0 ? vload8(0, f) : a0;
        a1 = nb > 1 ? vload8(1, f) : a1;
        a2 = nb > 2 ? vload8(2, f) : a2;
        a3 = nb > 3 ? vload8(3, f) : a3;
        a4 = nb > 4 ? vload8(4, f) : a4;
        a5 = nb > 5 ? vload8(5, f) : a5;
        a6 = nb > 6 ? vload8(6, f) : a6;
        a7 = nb > 7 ? vload8(7, f) : a7;
    }
    if (nb > 0)
        for (int r = 0; r < rows; r++) {
            const long o = off + (long)r * ld + c0;
            a0 += clremat_colsum_ld8(x, fmt, o);
            if (nb > 1)
                a1 += clremat_colsum_ld8(x, fmt, o + 8);
            if (nb > 2)
                a2 += clremat_colsum_ld8(x, fmt, o + 16);
            if (nb > 3)
                a3 += clremat_colsum_ld8(x, fmt, o + 24);
            if (nb > 4)
                a4 += clremat_colsum_ld8(x, fmt, o + 32);
            if (nb > 5)
                a5 += clremat_colsum_ld8(x, fmt, o + 40);
            if (nb > 6)
                a6 += clremat_colsum_ld8(x, fmt, o + 48);
            if (nb > 7)
                a7 += clremat_colsum_ld8(x, fmt, o + 56);
        }
    s[0] = a0, s[1] = a1, s[2] = a2, s[3] = a3, s[4] = a4, s[5] = a5, s[6] = a6, s[7] = a7;
}

/* The sum of column c alone, from a0. */
inline float clremat_colsum_one(const int rows, const int ld, const long off, const int fmt, __global const uchar *x,
                                const int c, const float a0)
{
    float a = a0;
    for (int r = 0; r < rows; r++) {
        const long i = off + (long)r * ld + c;
        a += fmt ? clremat_ld16(x, fmt, i) : ((__global const float *)x)[i];
    }
    return a;
}

/* The work-item's columns: the first c0, its whole blocks *nb, its end. */
inline int clremat_colsum_span(const int cols, const int blocks, int *nb, int *end)
{
    const int w = clamp(blocks, 1, CLREMAT_COLSUM_WIDE), c0 = get_global_id(0) * 8 * w;
    *nb = c0 < cols ? min(w, (cols - c0) / 8) : 0;
    *end = min(cols, c0 + 8 * w);
    return c0;
}

/* resume: continue the sums already in y (rows after those of the launch
 * before) instead of starting from 0. */
inline void clremat_colsum_store(const int rows, const int cols, const int ld, const long off, const int blocks,
                                 const int fmt, __global const uchar *x, __global float *y, const int resume)
{
    float8 s[CLREMAT_COLSUM_WIDE];
    int nb, end;
    const int c0 = clremat_colsum_span(cols, blocks, &nb, &end);
    clremat_colsum_blocks(rows, ld, off, fmt, x, c0, nb, s, resume ? y : (__global const float *)0);
    for (int b = 0; b < nb; b++)
        vstore8(s[b], 0, y + c0 + 8 * b);
    for (int c = c0 + 8 * nb; c < end; c++)
        y[c] = clremat_colsum_one(rows, ld, off, fmt, x, c, resume ? y[c] : 0.0f);
}

inline void clremat_colsum_upd(const int rows, const int cols, const int blocks, const int fmt,
                               __global const uchar *x, __global float *p, __global float *s0, __global float *s1,
                               const float8 hp, const int kind)
{
    float8 s[CLREMAT_COLSUM_WIDE];
    int nb, end;
    const int c0 = clremat_colsum_span(cols, blocks, &nb, &end);
    clremat_colsum_blocks(rows, cols, 0, fmt, x, c0, nb, s, (__global const float *)0);
    for (int b = 0; b < nb; b++)
        clremat_opt_cols8(kind, hp, s[b], p, s0, s1, c0 + 8 * b);
    for (int c = c0 + 8 * nb; c < end; c++)
        clremat_opt1(kind, hp, clremat_colsum_one(rows, cols, 0, fmt, x, c, 0.0f), p, s0, s1, c);
}

__kernel void clremat_colsum8(const int rows, const int cols, const int ld, const int off, const int blocks,
                              __global const float *x, __global float *y, const int resume)
{
    clremat_colsum_store(rows, cols, ld, off, blocks, 0, (__global const uchar *)x, y, resume);
}

__kernel void clremat_colsum8_16(const int rows, const int cols, const int ld, const int off, const int blocks,
                                 const int fmt, __global const uchar *x, __global float *y, const int resume)
{
    clremat_colsum_store(rows, cols, ld, off, blocks, fmt, x, y, resume);
}

__kernel void clremat_colsum8_upd(const int rows, const int cols, const int blocks, __global const float *x,
                                  __global float *p, __global float *s0, __global float *s1, const float8 hp,
                                  const int kind)
{
    clremat_colsum_upd(rows, cols, blocks, 0, (__global const uchar *)x, p, s0, s1, hp, kind);
}

__kernel void clremat_colsum8_upd16(const int rows, const int cols, const int blocks, const int fmt,
                                    __global const uchar *x, __global float *p, __global float *s0,
                                    __global float *s1, const float8 hp, const int kind)
{
    clremat_colsum_upd(rows, cols, blocks, fmt, x, p, s0, s1, hp, kind);
}

/* The embedding's launches under a mixed policy (backend/layer_embedding.c):
 * emb_forward, emb_backward_table(_acc) and emb_backward_pos with the
 * output / its gradient in format fmt, the same float32 sums in the same
 * order (a 16-bit dout widened exactly, out rounded once). */
/* emb_forward16: eight output elements per work-item (launch
 * ceil(ntok * dim / 8)), a whole block rounded by one vector conversion
 * (PoCL's scalar vstore_half_rte has no F16C). */
__kernel void emb_forward16(const int ntok, const int dim, const int vocab, const int T, const int positions,
                            __global const float *ids, __global const float *table, __global const float *pos,
                            const int fmt, __global uchar *out)
{
    const int i0 = get_global_id(0) * 8, n = ntok * dim;
    if (i0 + 8 <= n) {
        float t[8];
        for (int j = 0; j < 8; j++)
            t[j] = emb_value(i0 + j, dim, vocab, T, positions, ids, table, pos);
        gc16_st8(out, fmt, i0, vload8(0, t));
    } else {
        for (int i = i0; i < n; i++)
            clremat_st16(out, fmt, i, emb_value(i, dim, vocab, T, positions, ids, table, pos));
    }
}

__kernel void emb_backward_table16(const int ntok, const int dim, const int vocab, const int acc,
                                   __global const float *ids, const int fmt, __global const uchar *dout,
                                   __global float *gtable, const int t0)
{
    const int v = get_global_id(0);
    if (v >= vocab)
        return;
    __global float *g = gtable + (size_t)v * dim;
    if (!acc)
        for (int d = 0; d < dim; d++)
            g[d] = 0.0f;
    for (int tok = t0; tok < ntok; tok++) {
        if (seq_clamp_id(ids[tok], vocab) != v)
            continue;
        int d = 0; /* eight columns at a time (one vector widening), each column's sum in token order */
        for (; d + 8 <= dim; d += 8)
            vstore8(vload8(0, g + d) + gc16_ld8(dout, fmt, (long)tok * dim + d), 0, g + d);
        for (; d < dim; d++)
            g[d] += clremat_ld16(dout, fmt, tok * dim + d);
    }
}

__kernel void emb_backward_pos16(const int nseq, const int T, const int dim, const int fmt,
                                 __global const uchar *dout, __global float *gpos)
{
    const int i = get_global_id(0);
    if (i >= T * dim)
        return;
    float s = 0.0f;
    for (int b = 0; b < nseq; b++)
        s += clremat_ld16(dout, fmt, b * T * dim + i);
    gpos[i] = s;
}

/* Softmax cross-entropy under a mixed policy (backend/layer_softmax_ce.c):
 * ce_forward_rows and ce_backward on logits of format fmt, the gradient
 * times scale (the float16 loss scale) stored in format fmt (acc: added to
 * its value first), as the staged conversion of ce_backward's floats. */
__kernel void ce_forward_rows16(const int rows, const int C, const int fmt, __global const uchar *logits,
                                __global const float *labels, __global float *part)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    const int o = r * C, y = seq_clamp_id(labels[r], C);
    float m = clremat_ld16(logits, fmt, o), s = 0.0f;
    int am = 0;
    for (int j = 1; j < C; j++) {
        const float x = clremat_ld16(logits, fmt, o + j);
        if (x > m) {
            m = x;
            am = j;
        }
    }
    for (int j = 0; j < C; j++)
        s += exp(clremat_ld16(logits, fmt, o + j) - m);
    part[r] = log(s) + m - clremat_ld16(logits, fmt, o + y);
    part[rows + r] = am == y ? 1.0f : 0.0f;
}

__kernel void ce_backward16(const int rows, const int C, const int acc, const int fmt, __global const uchar *logits,
                            __global const float *labels, __global uchar *din, const float divisor, const float scale)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    const int o = r * C, y = seq_clamp_id(labels[r], C);
    float m = clremat_ld16(logits, fmt, o), s = 0.0f;
    for (int j = 1; j < C; j++)
        m = fmax(m, clremat_ld16(logits, fmt, o + j));
    for (int j = 0; j < C; j++)
        s += exp(clremat_ld16(logits, fmt, o + j) - m);
    const float inv = 1.0f / s, invn = 1.0f / divisor;
    for (int j = 0; j < C; j++) {
        float v = (exp(clremat_ld16(logits, fmt, o + j) - m) * inv - (j == y ? 1.0f : 0.0f)) * invn;
        CLREMAT_SCALE_BY(v, scale);
        if (acc)
            v = clremat_ld16(din, fmt, o + j) + v;
        clremat_st16(din, fmt, o + j, v);
    }
}

/* clremat_count_nonfinite over n elements stored in format fmt. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void clremat_count_nonfinite16(const int n, const int fmt, __global const uchar *x, __global int *count)
{
    __local int part[256];
    const int lid = get_local_id(0);
    int c = 0;
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        c += isfinite(clremat_ld16(x, fmt, i)) ? 0 : 1;
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
 * Issue 21: the remaining elementwise kernels eight floats per work-item
 * (launch ceil(n / 8) items), with the arithmetic of their scalar
 * versions above, element for element, so results keep their bits. In
 * place (dst the same buffer as a source) is allowed: every item reads
 * and writes only its own eight elements.
 * ====================================================================== */

/* The keep mask of elements [i0, i0+W) (-1 kept, 0 dropped), for select:
 * clremat_hash_prefix once, clremat_hash's last round on W lanes, so the
 * hash vectorizes (a scalar chain of five rounds an element held the
 * dropout kernels at a third of the copy's bandwidth on PoCL). Same bits
 * as clremat_hash, for W = 8 (clremat_drop_keep8) and 16
 * (clremat_drop_keep16, the wide dropout's): one formula. */
#define CLREMAT_DEFINE_DROP_KEEP(W, LANES)                                                                       \
    int##W clremat_drop_keep##W(const float rate, const uint seed_lo, const uint seed_hi, const uint step,        \
                                const uint layer, const int i0, const uint off)                                 \
    {                                                                                                           \
        const uint h = clremat_hash_prefix(seed_lo, seed_hi, step, layer);                                      \
        const uint##W e = (uint##W)((uint)i0 + off) + (uint##W)LANES;                                           \
        const float##W u = convert_float##W(clremat_mix32x##W((uint##W)(h) ^ e) >> 8) * (1.0f / 16777216.0f); \
        return u >= rate;                                                                                       \
    }
CLREMAT_DEFINE_DROP_KEEP(8, (0, 1, 2, 3, 4, 5, 6, 7))
CLREMAT_DEFINE_DROP_KEEP(16, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

/* clremat_dropout, eight per item: y (=, or += when acc) keep ? x * scale : 0. */
__kernel void clremat_dropout8(const int n, const int acc, const float rate, const float scale, const uint seed_lo,
                               const uint seed_hi, const uint step, const uint layer, __global const float *x,
                               __global float *y, const uint off)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n) {
        float8 v = select((float8)(0.0f), clremat_load8(x, i0, n) * scale,
                          clremat_drop_keep8(rate, seed_lo, seed_hi, step, layer, i0, off));
        if (acc)
            v = clremat_load8(y, i0, n) + v;
        clremat_store8(y, i0, n, v);
    }
}

/* clremat_add_bcast without broadcast (both operands n floats): y = a + b. */
__kernel void clremat_add8(const int n, __global const float *a, __global const float *b, __global float *y)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n)
        clremat_store8(y, i0, n, clremat_load8(a, i0, n) + clremat_load8(b, i0, n));
}

/* clremat_copy_acc, eight per item: dst = src (acc == 0) or dst += src. */
__kernel void clremat_copy_acc8(const int n, const int acc, __global float *dst, __global const float *src)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n) {
        float8 v = clremat_load8(src, i0, n);
        if (acc)
            v = clremat_load8(dst, i0, n) + v;
        clremat_store8(dst, i0, n, v);
    }
}

/* mul_acc with the second factor read through an activation: dst (=, or +=
 * when acc) x * act(y), eight per item. The multiply layer's backward in the
 * activations mode, when the factor is a discarded activation output and y
 * its kept pre-activation: act is clremat_act8, the function that produced
 * the output in the forward, so the product has the unfused bits. */
__kernel void mul_acc_act8(const int n, const int acc, __global float *dst, __global const float *x,
                           __global const float *y, const int act)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 < n) {
        float8 v = clremat_load8(x, i0, n) * clremat_act8(act, clremat_load8(y, i0, n));
        if (acc)
            v = clremat_load8(dst, i0, n) + v;
        clremat_store8(dst, i0, n, v);
    }
}

/* ln_backward_dx and ln_backward_params with the input read through an
 * activation: x[i] is act(pre[i]) (clremat_act1, the bits of the forward's
 * activation output), the rest the arithmetic of those kernels operation
 * for operation. The layernorm's backward in the activations mode, when its
 * input is a discarded activation output and pre the producer's kept
 * pre-activation (backend/layer_layernorm.c). */
__kernel void ln_backward_dx_act(const int rows, const int D, const int acc, __global const float *pre,
                                 __global const float *stats, __global const float *gamma, __global const float *dy,
                                 __global float *dx, const int act)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = pre + (size_t)r * D;
    __global const float *dyr = dy + (size_t)r * D;
    __global float *dxr = dx + (size_t)r * D;
    const float mean = stats[2 * r], rstd = stats[2 * r + 1];
    float a = 0.0f, b = 0.0f;
    for (int d = 0; d < D; d++) {
        const float gd = gamma[d] * dyr[d];
        a += gd;
        b += gd * (clremat_act1(act, xr[d]) - mean) * rstd;
    }
    a /= (float)D;
    b /= (float)D;
    for (int d = 0; d < D; d++) {
        const float xhat = (clremat_act1(act, xr[d]) - mean) * rstd;
        const float v = rstd * (gamma[d] * dyr[d] - a - xhat * b);
        dxr[d] = acc ? dxr[d] + v : v;
    }
}

__kernel void ln_backward_params_act(const int rows, const int D, __global const float *pre,
                                     __global const float *stats, __global const float *dy, __global float *dgamma,
                                     __global float *dbeta, const int act, const int r0)
{
    const int d = get_global_id(0);
    if (d >= D)
        return;
    float sg = r0 > 0 ? dgamma[d] : 0.0f, sb = r0 > 0 ? dbeta[d] : 0.0f;
    for (int r = r0; r < rows; r++) {
        const size_t i = (size_t)r * D + d;
        sg += dy[i] * (clremat_act1(act, pre[i]) - stats[2 * r]) * stats[2 * r + 1];
        sb += dy[i];
    }
    dgamma[d] = sg;
    dbeta[d] = sb;
}

/* ------------------------------------------------------------------------
 * Mixed precision fused into elementwise layers (issue 16): each operand in
 * its storage format (clremat_cvt16's fmt: 0 float32, 1 binary16, 2
 * bfloat16), widened exactly on load, the float32 arithmetic of the float32
 * kernel on the same floats, rounded once on store. Eight elements per
 * work-item (launch ceil(n / 8)); lanes past n are zero and not stored. */

/* Elements [i0, i0 + 8) of format fmt, all of them there: the whole-block
 * load and store of clremat_ldf8 / clremat_stf8. */
float8 clremat_ld8_fmt(__global const uchar *p, const int fmt, const int i0)
{
    return fmt ? gc16_ld8(p, fmt, i0) : vload8(0, (__global const float *)p + i0);
}

void clremat_st8_fmt(__global uchar *p, const int fmt, const int i0, const float8 v)
{
    if (fmt)
        gc16_st8(p, fmt, i0, v);
    else
        vstore8(v, 0, (__global float *)p + i0);
}

float8 clremat_ldf8(__global const uchar *p, const int fmt, const int i0, const int n)
{
    float t[8];
    if (i0 + 8 <= n)
        return clremat_ld8_fmt(p, fmt, i0);
    for (int j = 0; j < 8; j++)
        t[j] = i0 + j < n ? (fmt ? gc16_ld(p, fmt, i0 + j) : ((__global const float *)p)[i0 + j]) : 0.0f;
    return vload8(0, t);
}

void clremat_stf8(__global uchar *p, const int fmt, const int i0, const int n, const float8 v)
{
    float t[8];
    if (i0 + 8 <= n) {
        clremat_st8_fmt(p, fmt, i0, v);
        return;
    }
    vstore8(v, 0, t);
    for (int j = 0; j < 8 && i0 + j < n; j++) {
        if (fmt)
            gc16_st(p, fmt, i0 + j, t[j]);
        else
            ((__global float *)p)[i0 + j] = t[j];
    }
}

/* The 16-bit elementwise kernels below write their body once, as an
 * always-inlined function of the block's first element i0 whose loads and
 * stores go through clremat_ldw8 / clremat_stw8 with a constant `whole`,
 * and CLREMAT_EW16 expands it: whole blocks of eight on a path of their
 * own (clremat_ld8_fmt / clremat_st8_fmt), with the formats as constants
 * where every operand is binary16 or every one bfloat16, so the format
 * tests fold away, else as given; the last, partial block through
 * clremat_ldf8 / clremat_stf8. With the tail's tests in the same path and
 * the formats read at run time, PoCL's code ran an add of bfloat16 at
 * half the copy's bandwidth (0.5 -> 1.0 with both changes,
 * bench/stream_bench). The arithmetic is the same in every expansion: the
 * same bits. */
#define EW16_INLINE inline __attribute__((always_inline))

EW16_INLINE float8 clremat_ldw8(__global const uchar *p, const int fmt, const int i0, const int n, const int whole)
{
    return whole ? clremat_ld8_fmt(p, fmt, i0) : clremat_ldf8(p, fmt, i0, n);
}

EW16_INLINE void clremat_stw8(__global uchar *p, const int fmt, const int i0, const int n, const int whole,
                              const float8 v)
{
    if (whole)
        clremat_st8_fmt(p, fmt, i0, v);
    else
        clremat_stf8(p, fmt, i0, n, v);
}

/* BODY(FA, FB, FC, WHOLE) for the block at i0 of n elements (nothing past n). */
#define CLREMAT_EW16(i0, n, fa, fb, fc, BODY)                                    \
    do {                                                                         \
        if ((i0) + 8 <= (n)) {                                                   \
            if ((fa) == 2 && (fb) == 2 && (fc) == 2)                             \
                BODY(2, 2, 2, 1);                                                \
            else if ((fa) == 1 && (fb) == 1 && (fc) == 1)                        \
                BODY(1, 1, 1, 1);                                                \
            else                                                                 \
                BODY(fa, fb, fc, 1);                                             \
        } else if ((i0) < (n)) {                                                 \
            BODY(fa, fb, fc, 0);                                                 \
        }                                                                        \
    } while (0)

EW16_INLINE void clremat_act_bwd16_at(const int n, const int act, const int acc, const int fx,
                                      __global const uchar *x, const int fdy, __global const uchar *dy, const int fz,
                                      __global uchar *z, const int i0, const int whole)
{
    float8 g = clremat_ldw8(dy, fdy, i0, n, whole) * clremat_dact8(act, clremat_ldw8(x, fx, i0, n, whole));
    if (acc)
        g = clremat_ldw8(z, fz, i0, n, whole) + g;
    clremat_stw8(z, fz, i0, n, whole, g);
}

/* z (=, or old + when acc) dy * act'(x): clremat_act_bwd8 on formats fx,
 * fdy, fz (the dense layer's dZ in float32, an activation layer's dx). */
__kernel void clremat_act_bwd16(const int n, const int act, const int acc, const int fx, __global const uchar *x,
                                const int fdy, __global const uchar *dy, const int fz, __global uchar *z)
{
    const int i0 = get_global_id(0) * 8;
#define ACT_BWD16_AT(FX, FDY, FZ, W) clremat_act_bwd16_at(n, act, acc, FX, x, FDY, dy, FZ, z, i0, W)
    CLREMAT_EW16(i0, n, fx, fdy, fz, ACT_BWD16_AT);
#undef ACT_BWD16_AT
}

/* y = a + b (clremat_add8) on formats fa, fb, fy. */
__kernel void clremat_add16(const int n, const int fa, __global const uchar *a, const int fb, __global const uchar *b,
                            const int fy, __global uchar *y)
{
    const int i0 = get_global_id(0) * 8;
#define ADD16_AT(FA, FB, FY, W) \
    clremat_stw8(y, FY, i0, n, W, clremat_ldw8(a, FA, i0, n, W) + clremat_ldw8(b, FB, i0, n, W))
    CLREMAT_EW16(i0, n, fa, fb, fy, ADD16_AT);
#undef ADD16_AT
}

EW16_INLINE void clremat_dropout16_at(const int n, const int acc, const float scale, const int8 keep, const int fx,
                                      __global const uchar *x, const int fy, __global uchar *y, const int i0,
                                      const int whole)
{
    float8 v = select((float8)(0.0f), clremat_ldw8(x, fx, i0, n, whole) * scale, keep);
    if (acc)
        v = clremat_ldw8(y, fy, i0, n, whole) + v;
    clremat_stw8(y, fy, i0, n, whole, v);
}

/* clremat_dropout8 on formats fx, fy: the same mask (clremat_drop_keep8),
 * the same product, acc adding the old value of y. */
__kernel void clremat_dropout16(const int n, const int acc, const float rate, const float scale, const uint seed_lo,
                                const uint seed_hi, const uint step, const uint layer, const int fx,
                                __global const uchar *x, const int fy, __global uchar *y, const uint off)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 >= n)
        return;
    const int8 keep = clremat_drop_keep8(rate, seed_lo, seed_hi, step, layer, i0, off);
    /* two formats: y's stands in for the third */
#define DROPOUT16_AT(FX, FY, FY_AGAIN, W) clremat_dropout16_at(n, acc, scale, keep, FX, x, FY, y, i0, W)
    CLREMAT_EW16(i0, n, fx, fy, fy, DROPOUT16_AT);
#undef DROPOUT16_AT
}

/* Sixteen elements from i0 of p (format fmt, CLREMAT_FMT_*) widened to
 * float, and stored rounded: clremat_ld8_fmt / clremat_st8_fmt on sixteen
 * lanes (the bfloat16 rounding of gc16_bf16x8 lane for lane; one 32-byte
 * store where aligned, as gc16_st8 does with 16 bytes). */
#if CLREMAT_EW == 16
float16 clremat_ld16_fmt(__global const uchar *p, const int fmt, const int i0)
{
    if (fmt == 1)
        return vload_half16(0, (__global const half *)p + i0);
    if (fmt == 2)
        return as_float16(convert_uint16(vload16(0, (__global const ushort *)p + i0)) << 16);
    return vload16(0, (__global const float *)p + i0);
}

void clremat_st16_fmt(__global uchar *p, const int fmt, const int i0, const float16 v)
{
    if (fmt == 1) {
        vstore_half16_rte(v, 0, (__global half *)p + i0);
    } else if (fmt == 2) {
        __global ushort *q = (__global ushort *)p + i0;
        const uint16 u = as_uint16(v);
        const uint16 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, qn = (u >> 16) | 0x0040u;
        const ushort16 b = convert_ushort16(select(r, qn, (u & 0x7fffffffu) > 0x7f800000u));
        if (((ulong)q & 31) == 0)
            *(__global ushort16 *)q = b;
        else
            vstore16(b, 0, q);
    } else {
        vstore16(v, 0, (__global float *)p + i0);
    }
}
#endif

/* clremat_cvt16x8's floats, CLREMAT_EW per work-item (the wide kernels
 * above): a whole block of sixteen with no activation or a CLREMAT_ACT_WIDE
 * one in one sixteen-wide pass. */
__kernel void clremat_cvt16w(const int n, const int act, const float scale, const int acc, const int sfmt,
                             __global const uchar *src, const int dfmt, __global uchar *dst)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n && (act == CLREMAT_ACT_NONE || CLREMAT_ACT_WIDE(act))) {
        float16 v = clremat_ld16_fmt(src, sfmt, i0);
        if (act)
            v = gc_act16(act, v);
        CLREMAT_SCALE_BY(v, scale);
        if (acc)
            v = clremat_ld16_fmt(dst, dfmt, i0) + v;
        clremat_st16_fmt(dst, dfmt, i0, v);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8) {
        const int j = i0 + h;
        if (j < n) {
            float8 v = clremat_ldf8(src, sfmt, j, n);
            if (act)
                v = clremat_act8(act, v);
            CLREMAT_SCALE_BY(v, scale);
            if (acc)
                v = clremat_ldf8(dst, dfmt, j, n) + v;
            clremat_stf8(dst, dfmt, j, n, v);
        }
    }
}

/* clremat_dropout16's floats, CLREMAT_EW per work-item: a whole block of
 * sixteen draws its mask as one sixteen-lane hash (clremat_drop_keep16:
 * clremat_drop_keep8's formula, the same mask) and rounds through
 * clremat_st16_fmt; the last partial block, and every block
 * where CLREMAT_EW is 8, runs clremat_dropout16's eight-wide code. */
__kernel void clremat_dropout16w(const int n, const int acc, const float rate, const float scale, const uint seed_lo,
                                 const uint seed_hi, const uint step, const uint layer, const int fx,
                                 __global const uchar *x, const int fy, __global uchar *y, const uint off)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n) {
        float16 v = select((float16)(0.0f), clremat_ld16_fmt(x, fx, i0) * scale,
                           clremat_drop_keep16(rate, seed_lo, seed_hi, step, layer, i0, off));
        if (acc)
            v = clremat_ld16_fmt(y, fy, i0) + v;
        clremat_st16_fmt(y, fy, i0, v);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8) {
        const int j = i0 + h;
        if (j < n) {
            float8 v = select((float8)(0.0f), clremat_ldf8(x, fx, j, n) * scale,
                              clremat_drop_keep8(rate, seed_lo, seed_hi, step, layer, j, off));
            if (acc)
                v = clremat_ldf8(y, fy, j, n) + v;
            clremat_stf8(y, fy, j, n, v);
        }
    }
}

/* clremat_act_bwd16's floats, CLREMAT_EW per work-item. */
__kernel void clremat_act_bwd16w(const int n, const int act, const int acc, const int fx, __global const uchar *x,
                                 const int fdy, __global const uchar *dy, const int fz, __global uchar *z)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n && CLREMAT_ACT_WIDE(act)) {
        float16 g = clremat_ld16_fmt(dy, fdy, i0) * gc_dact16(act, clremat_ld16_fmt(x, fx, i0));
        if (acc)
            g = clremat_ld16_fmt(z, fz, i0) + g;
        clremat_st16_fmt(z, fz, i0, g);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8)
        if (i0 + h < n)
            clremat_act_bwd16_at(n, act, acc, fx, x, fdy, dy, fz, z, i0 + h, i0 + h + 8 <= n);
}

/* ------------------------------------------------------------------------
 * GELU (tanh form) on 16-bit operands by table (backend/act_table.c). A
 * 16-bit value has 65536 bit patterns, so act(x) or act'(x) in float32 for
 * every one of them fits a table of 256 KiB, which the host fills with
 * clremat_act_table16 (the eight-wide clremat_act8 / clremat_dact8 whose
 * bits the elementwise kernels' every path shares for this activation) and
 * the two kernels below read in place of an exp and a division per
 * element: the same floats, so the same bits as clremat_cvt16w /
 * clremat_act_bwd16w, 1.4-1.8 times as fast on PoCL
 * (bench/stream_bench). */

/* table[i] = act(x) (deriv 0) or act'(x) (deriv 1), x the value of bits i
 * in format fmt (1 binary16, 2 bfloat16); launch 65536 / 8 work-items. */
__kernel void clremat_act_table16(const int act, const int deriv, const int fmt, __global float *table)
{
    const int i0 = get_global_id(0) * 8;
    const ushort8 bits = convert_ushort8((int8)(0, 1, 2, 3, 4, 5, 6, 7) + i0);
    const float8 x = fmt == 1 ? vload_half8(0, (const __private half *)&bits)
                              : as_float8(convert_uint8(bits) << 16);
    vstore8(deriv ? clremat_dact8(act, x) : clremat_act8(act, x), 0, table + i0);
}

/* The bits of elements [i0, i0 + 8) of a 16-bit array (one 16-byte load
 * where aligned); past n (whole 0) they are 0 and not used. */
EW16_INLINE ushort8 clremat_bits8(__global const uchar *p, const int i0, const int n, const int whole)
{
    __global const ushort *q = (__global const ushort *)p + i0;
    ushort t[8];
    if (whole)
        return vload8(0, q);
    for (int j = 0; j < 8; j++)
        t[j] = i0 + j < n ? q[j] : 0;
    return vload8(0, t);
}

#define CLREMAT_LOOKUP8(t, u) \
    (float8)((t)[(u).s0], (t)[(u).s1], (t)[(u).s2], (t)[(u).s3], (t)[(u).s4], (t)[(u).s5], (t)[(u).s6], (t)[(u).s7])

EW16_INLINE void clremat_cvt16_table_at(const int n, const float scale, const int acc, __global const uchar *src,
                                        const int dfmt, __global uchar *dst, __global const float *table,
                                        const int i0, const int whole)
{
    float8 v = CLREMAT_LOOKUP8(table, clremat_bits8(src, i0, n, whole));
    CLREMAT_SCALE_BY(v, scale);
    if (acc)
        v = clremat_ldw8(dst, dfmt, i0, n, whole) + v;
    clremat_stw8(dst, dfmt, i0, n, whole, v);
}

#define CLREMAT_LOOKUP16(t, u) \
    (float16)(CLREMAT_LOOKUP8(t, (u).lo), CLREMAT_LOOKUP8(t, (u).hi))

/* dst (format dfmt; acc: old + new) = table[src bits] * scale: clremat_cvt16w
 * with a table of its act over src's format; CLREMAT_EW elements per
 * work-item (launch clremat_ew_items), a whole block of sixteen in one
 * sixteen-wide pass where CLREMAT_EW is 16. */
__kernel void clremat_cvt16_table(const int n, const float scale, const int acc, __global const uchar *src,
                                  const int dfmt, __global uchar *dst, __global const float *table)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n) {
        float16 v = CLREMAT_LOOKUP16(table, vload16(0, (__global const ushort *)src + i0));
        CLREMAT_SCALE_BY(v, scale);
        if (acc)
            v = clremat_ld16_fmt(dst, dfmt, i0) + v;
        clremat_st16_fmt(dst, dfmt, i0, v);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8)
        if (i0 + h < n)
            clremat_cvt16_table_at(n, scale, acc, src, dfmt, dst, table, i0 + h, i0 + h + 8 <= n);
}

EW16_INLINE void clremat_act_bwd16_table_at(const int n, const int acc, __global const uchar *x, const int fdy,
                                            __global const uchar *dy, const int fz, __global uchar *z,
                                            __global const float *table, const int i0, const int whole)
{
    float8 g = clremat_ldw8(dy, fdy, i0, n, whole) * CLREMAT_LOOKUP8(table, clremat_bits8(x, i0, n, whole));
    if (acc)
        g = clremat_ldw8(z, fz, i0, n, whole) + g;
    clremat_stw8(z, fz, i0, n, whole, g);
}

/* z (format fz; acc: old + new) = dy * table[x bits]: clremat_act_bwd16w
 * with a table of act' over x's format, CLREMAT_EW elements per work-item
 * as clremat_cvt16_table. */
__kernel void clremat_act_bwd16_table(const int n, const int acc, __global const uchar *x, const int fdy,
                                      __global const uchar *dy, const int fz, __global uchar *z,
                                      __global const float *table)
{
    const int i0 = get_global_id(0) * CLREMAT_EW;
#if CLREMAT_EW == 16
    if (i0 + 16 <= n) {
        float16 g = clremat_ld16_fmt(dy, fdy, i0) * CLREMAT_LOOKUP16(table, vload16(0, (__global const ushort *)x + i0));
        if (acc)
            g = clremat_ld16_fmt(z, fz, i0) + g;
        clremat_st16_fmt(z, fz, i0, g);
        return;
    }
#endif
    for (int h = 0; h < CLREMAT_EW; h += 8)
        if (i0 + h < n)
            clremat_act_bwd16_table_at(n, acc, x, fdy, dy, fz, z, table, i0 + h, i0 + h + 8 <= n);
}

/* Layernorm on formats: x and dy of fx / fdy, y and dx of fy / fdx
 * (clremat_ldf / clremat_stf; stats, gamma, beta and the parameter
 * gradients float32): the float32 kernels' bodies on the widened values,
 * each stored value rounded once. Each kernel expands its body once per
 * common case (every operand bfloat16, every operand binary16) with the
 * formats as constants, so the per-element format test folds away; the
 * general body serves mixed formats (a float32 model input). */
float clremat_ldf(__global const uchar *p, const int fmt, const size_t i)
{
    return fmt ? gc16_ld(p, fmt, (long)i) : ((__global const float *)p)[i];
}

void clremat_stf(__global uchar *p, const int fmt, const size_t i, const float v)
{
    if (fmt)
        gc16_st(p, fmt, (long)i, v);
    else
        ((__global float *)p)[i] = v;
}

/* The bodies read and write eight elements of a row at a time (clremat_ldf8
 * / clremat_stf8: contiguous loads, one vector conversion) and the row's
 * tail one by one; every sum still adds element after element in order,
 * each term written as the float32 kernels write it, so the floats are the
 * float32 kernels' (and the staged path's) bit for bit. The rows are
 * within [0, rows * D), so n = o + D bounds every eight-element access. */
#define LN16_SUM8(s, t) \
    s += t.s0; s += t.s1; s += t.s2; s += t.s3; s += t.s4; s += t.s5; s += t.s6; s += t.s7;
#define LN16_SQ8(v, t)                                                                                          \
    v += t.s0 * t.s0; v += t.s1 * t.s1; v += t.s2 * t.s2; v += t.s3 * t.s3; v += t.s4 * t.s4;                 \
    v += t.s5 * t.s5; v += t.s6 * t.s6; v += t.s7 * t.s7;
#define LN16_AB1(j) a += gd.j; b += gd.j * xm.j * rstd;
#define LN16_AB8 LN16_AB1(s0) LN16_AB1(s1) LN16_AB1(s2) LN16_AB1(s3) LN16_AB1(s4) LN16_AB1(s5) LN16_AB1(s6) LN16_AB1(s7)

#define CLREMAT_LN16_FORWARD_BODY                                                                                  \
    const int r = get_global_id(0);                                                                                \
    if (r >= rows)                                                                                                 \
        return;                                                                                                    \
    const int o = r * D, e = o + D;                                                                                \
    float s = 0.0f, v = 0.0f;                                                                                      \
    int d;                                                                                                         \
    for (d = 0; d + 8 <= D; d += 8) {                                                                              \
        const float8 t = clremat_ldf8(x, fx, o + d, e);                                                            \
        LN16_SUM8(s, t)                                                                                            \
    }                                                                                                              \
    for (; d < D; d++)                                                                                             \
        s += clremat_ldf(x, fx, o + d);                                                                            \
    const float mean = s / (float)D;                                                                               \
    for (d = 0; d + 8 <= D; d += 8) {                                                                              \
        const float8 t = clremat_ldf8(x, fx, o + d, e) - mean;                                                     \
        LN16_SQ8(v, t)                                                                                             \
    }                                                                                                              \
    for (; d < D; d++) {                                                                                           \
        const float t = clremat_ldf(x, fx, o + d) - mean;                                                          \
        v += t * t;                                                                                                \
    }                                                                                                              \
    const float rstd = 1.0f / sqrt(v / (float)D + eps);                                                            \
    for (d = 0; d + 8 <= D; d += 8)                                                                                \
        clremat_stf8(y, fy, o + d, e,                                                                              \
                     (clremat_ldf8(x, fx, o + d, e) - mean) * rstd * vload8(0, gamma + d) + vload8(0, beta + d));  \
    for (; d < D; d++)                                                                                             \
        clremat_stf(y, fy, o + d, (clremat_ldf(x, fx, o + d) - mean) * rstd * gamma[d] + beta[d]);                 \
    stats[2 * r] = mean;                                                                                           \
    stats[2 * r + 1] = rstd;

#define CLREMAT_LN16_BACKWARD_DX_BODY                                                                              \
    const int r = get_global_id(0);                                                                                \
    if (r >= rows)                                                                                                 \
        return;                                                                                                    \
    const int o = r * D, e = o + D;                                                                                \
    const float mean = stats[2 * r], rstd = stats[2 * r + 1];                                                      \
    float a = 0.0f, b = 0.0f;                                                                                      \
    int d;                                                                                                         \
    for (d = 0; d + 8 <= D; d += 8) {                                                                              \
        const float8 gd = vload8(0, gamma + d) * clremat_ldf8(dy, fdy, o + d, e);                                  \
        const float8 xm = clremat_ldf8(x, fx, o + d, e) - mean;                                                    \
        LN16_AB8                                                                                                   \
    }                                                                                                              \
    for (; d < D; d++) {                                                                                           \
        const float gd = gamma[d] * clremat_ldf(dy, fdy, o + d);                                                   \
        a += gd;                                                                                                   \
        b += gd * (clremat_ldf(x, fx, o + d) - mean) * rstd;                                                       \
    }                                                                                                              \
    a /= (float)D;                                                                                                 \
    b /= (float)D;                                                                                                 \
    for (d = 0; d + 8 <= D; d += 8) {                                                                              \
        const float8 xhat = (clremat_ldf8(x, fx, o + d, e) - mean) * rstd;                                         \
        const float8 v = rstd * (vload8(0, gamma + d) * clremat_ldf8(dy, fdy, o + d, e) - a - xhat * b);           \
        clremat_stf8(dx, fdx, o + d, e, acc ? clremat_ldf8(dx, fdx, o + d, e) + v : v);                            \
    }                                                                                                              \
    for (; d < D; d++) {                                                                                           \
        const float xhat = (clremat_ldf(x, fx, o + d) - mean) * rstd;                                              \
        const float v = rstd * (gamma[d] * clremat_ldf(dy, fdy, o + d) - a - xhat * b);                            \
        clremat_stf(dx, fdx, o + d, acc ? clremat_ldf(dx, fdx, o + d) + v : v);                                    \
    }

/* Eight columns per work-item (launch ceil(D / 8)); rows in order. */
#define CLREMAT_LN16_BACKWARD_PARAMS_BODY                                                                          \
    const int c0 = get_global_id(0) * 8;                                                                           \
    if (c0 >= D)                                                                                                   \
        return;                                                                                                    \
    if (c0 + 8 <= D) {                                                                                             \
        float8 sg = r0 > 0 ? vload8(0, dgamma + c0) : 0.0f, sb = r0 > 0 ? vload8(0, dbeta + c0) : 0.0f;            \
        for (int r = r0; r < rows; r++) {                                                                          \
            const int i = r * D + c0;                                                                              \
            const float8 dyv = clremat_ldf8(dy, fdy, i, i + 8);                                                    \
            sg += dyv * (clremat_ldf8(x, fx, i, i + 8) - stats[2 * r]) * stats[2 * r + 1];                         \
            sb += dyv;                                                                                             \
        }                                                                                                          \
        vstore8(sg, 0, dgamma + c0);                                                                               \
        vstore8(sb, 0, dbeta + c0);                                                                                \
    } else                                                                                                         \
        for (int d = c0; d < D; d++) {                                                                             \
            float sg = r0 > 0 ? dgamma[d] : 0.0f, sb = r0 > 0 ? dbeta[d] : 0.0f;                                   \
            for (int r = r0; r < rows; r++) {                                                                      \
                const int i = r * D + d;                                                                           \
                sg += clremat_ldf(dy, fdy, i) * (clremat_ldf(x, fx, i) - stats[2 * r]) * stats[2 * r + 1];         \
                sb += clremat_ldf(dy, fdy, i);                                                                     \
            }                                                                                                      \
            dgamma[d] = sg;                                                                                        \
            dbeta[d] = sb;                                                                                         \
        }


__kernel void ln_forward16(const int rows, const int D, const float eps, const int fx_, __global const uchar *x,
                           __global const float *gamma, __global const float *beta, const int fy_, __global uchar *y,
                           __global float *stats)
{
    if (fx_ == 2 && fy_ == 2) {
        const int fx = 2, fy = 2;
        CLREMAT_LN16_FORWARD_BODY
    } else if (fx_ == 1 && fy_ == 1) {
        const int fx = 1, fy = 1;
        CLREMAT_LN16_FORWARD_BODY
    } else {
        const int fx = fx_, fy = fy_;
        CLREMAT_LN16_FORWARD_BODY
    }
}

__kernel void ln_backward_dx16(const int rows, const int D, const int acc, const int fx_, __global const uchar *x,
                               __global const float *stats, __global const float *gamma, const int fdy_,
                               __global const uchar *dy, const int fdx_, __global uchar *dx)
{
    if (fx_ == 2 && fdy_ == 2 && fdx_ == 2) {
        const int fx = 2, fdy = 2, fdx = 2;
        CLREMAT_LN16_BACKWARD_DX_BODY
    } else if (fx_ == 1 && fdy_ == 1 && fdx_ == 1) {
        const int fx = 1, fdy = 1, fdx = 1;
        CLREMAT_LN16_BACKWARD_DX_BODY
    } else {
        const int fx = fx_, fdy = fdy_, fdx = fdx_;
        CLREMAT_LN16_BACKWARD_DX_BODY
    }
}

__kernel void ln_backward_params16(const int rows, const int D, const int fx_, __global const uchar *x,
                                   __global const float *stats, const int fdy_, __global const uchar *dy,
                                   __global float *dgamma, __global float *dbeta, const int r0)
{
    if (fx_ == 2 && fdy_ == 2) {
        const int fx = 2, fdy = 2;
        CLREMAT_LN16_BACKWARD_PARAMS_BODY
    } else if (fx_ == 1 && fdy_ == 1) {
        const int fx = 1, fdy = 1;
        CLREMAT_LN16_BACKWARD_PARAMS_BODY
    } else {
        const int fx = fx_, fdy = fdy_;
        CLREMAT_LN16_BACKWARD_PARAMS_BODY
    }
}


/* clremat_cvt16 eight elements per work-item (launch ceil(n / 8)): the same
 * floats (clremat_act8 is clremat_act1 lane by lane), contiguous loads and
 * stores; the conversion every staged layer and fused add / dropout use.
 * Whole blocks of eight take a path of their own, without the partial
 * block's element loops (PoCL ran the shared form 8-15% slower on a
 * GELU, bench/stream_bench). */
__kernel void clremat_cvt16x8(const int n, const int act, const float scale, const int acc, const int sfmt,
                              __global const uchar *src, const int dfmt, __global uchar *dst)
{
    const int i0 = get_global_id(0) * 8;
    if (i0 + 8 <= n) {
        float8 v = clremat_ld8_fmt(src, sfmt, i0);
        if (act)
            v = clremat_act8(act, v);
        CLREMAT_SCALE_BY(v, scale);
        if (acc)
            v = clremat_ld8_fmt(dst, dfmt, i0) + v;
        clremat_st8_fmt(dst, dfmt, i0, v);
    } else if (i0 < n) {
        float8 v = clremat_ldf8(src, sfmt, i0, n);
        if (act)
            v = clremat_act8(act, v);
        CLREMAT_SCALE_BY(v, scale);
        if (acc)
            v = clremat_ldf8(dst, dfmt, i0, n) + v;
        clremat_stf8(dst, dfmt, i0, n, v);
    }
}

/* float16 loss scaling in one pass per gradient (issue 16): counts the
 * non-finite values of the scaled gradient g into *count (one atomic per
 * work-item that saw any, so a finite gradient costs no atomic) and
 * unscales it in place, g[i] * inv (one float32 product). Eight elements
 * [i0, i0 + 8) of g's n per call. A skipped step discards the gradient,
 * so unscaling it before the count is known changes nothing. */
inline void clremat_unscale_check_at(const int n, const float inv, __global float *g, __global int *count,
                                     const int i0)
{
    if (i0 + 8 <= n) {
        const float8 v = vload8(0, g + i0);
        vstore8(v * inv, 0, g + i0);
        if (any(isnan(v - v))) { /* an infinity or a NaN among the eight */
            const int8 f = isfinite(v); /* -1 finite, 0 not */
            atomic_add(count, 8 + f.s0 + f.s1 + f.s2 + f.s3 + f.s4 + f.s5 + f.s6 + f.s7);
        }
    } else if (i0 < n) {
        int c = 0;
        for (int i = i0; i < n; i++) {
            c += isfinite(g[i]) ? 0 : 1;
            g[i] *= inv;
        }
        if (c)
            atomic_add(count, c);
    }
}

/* clremat_unscale_check_at over up to eight gradients in one launch (a
 * step's gradients in a few launches, not one each): gradient j has n_j
 * floats at g_j; work-items cover ceil(n_0 / 8) + ... + ceil(n_7 / 8)
 * blocks of eight, gradient by gradient; an unused slot has n = 0. */
__kernel void clremat_unscale_check8_multi(const int8 n, const float inv, __global float *g0, __global float *g1,
                                           __global float *g2, __global float *g3, __global float *g4,
                                           __global float *g5, __global float *g6, __global float *g7,
                                           __global int *count)
{
    int b = get_global_id(0);
    const int8 nb = (n + 7) / 8;
    if (b < nb.s0)
        clremat_unscale_check_at(n.s0, inv, g0, count, b * 8);
    else if ((b -= nb.s0) < nb.s1)
        clremat_unscale_check_at(n.s1, inv, g1, count, b * 8);
    else if ((b -= nb.s1) < nb.s2)
        clremat_unscale_check_at(n.s2, inv, g2, count, b * 8);
    else if ((b -= nb.s2) < nb.s3)
        clremat_unscale_check_at(n.s3, inv, g3, count, b * 8);
    else if ((b -= nb.s3) < nb.s4)
        clremat_unscale_check_at(n.s4, inv, g4, count, b * 8);
    else if ((b -= nb.s4) < nb.s5)
        clremat_unscale_check_at(n.s5, inv, g5, count, b * 8);
    else if ((b -= nb.s5) < nb.s6)
        clremat_unscale_check_at(n.s6, inv, g6, count, b * 8);
    else if ((b -= nb.s6) < nb.s7)
        clremat_unscale_check_at(n.s7, inv, g7, count, b * 8);
}

/* clremat_cvt16x8 (no activation, scale (the host passes 1), no
 * accumulation: the same floats) over up to four buffers in one launch, the
 * staged layers' conversions at their boundary: segment j converts n_j
 * elements of s_j (format sf_j) into d_j (format df_j). Work-items cover
 * ceil(n_0 / 8) + ... + ceil(n_3 / 8) blocks of eight, segment by segment;
 * an unused segment has n = 0. */
__kernel void clremat_cvt16x8_multi(const int4 n, const int4 sf, const int4 df, const float scale,
                                    __global const uchar *s0,
                                    __global uchar *d0, __global const uchar *s1, __global uchar *d1,
                                    __global const uchar *s2, __global uchar *d2, __global const uchar *s3,
                                    __global uchar *d3)
{
    int b = get_global_id(0);
    const int4 nb = (n + 7) / 8;
    __global const uchar *s;
    __global uchar *d;
    int cnt, sfmt, dfmt;
    if (b < nb.s0) {
        s = s0, d = d0, cnt = n.s0, sfmt = sf.s0, dfmt = df.s0;
    } else if ((b -= nb.s0) < nb.s1) {
        s = s1, d = d1, cnt = n.s1, sfmt = sf.s1, dfmt = df.s1;
    } else if ((b -= nb.s1) < nb.s2) {
        s = s2, d = d2, cnt = n.s2, sfmt = sf.s2, dfmt = df.s2;
    } else if ((b -= nb.s2) < nb.s3) {
        s = s3, d = d3, cnt = n.s3, sfmt = sf.s3, dfmt = df.s3;
    } else {
        return;
    }
    float8 v = clremat_ldf8(s, sfmt, b * 8, cnt);
    CLREMAT_SCALE_BY(v, scale);
    clremat_stf8(d, dfmt, b * 8, cnt, v);
}
