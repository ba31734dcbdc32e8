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
