/* transfer.h: the cost of offloading to host memory on a device: copy
 * bandwidth both ways and the device's GEMM rate, measured once per device
 * and driver and cached (backend/transfer_calibrate.c). */
#ifndef CLREMAT_TRANSFER_H
#define CLREMAT_TRANSFER_H

#include "backend.h"

/** A device's transfer calibration. */
typedef struct clremat_transfer_calibration {
    double to_host_gbs;     /**< device -> host copy bandwidth, GB/s (blocking 8 MiB reads, median of 3) */
    double to_device_gbs;   /**< host -> device, GB/s */
    double gemm_gflops;     /**< native 256^3 GEMM rate, GFLOP/s: converts copy time to FLOPs */
    int host_unified;       /**< CL_DEVICE_HOST_UNIFIED_MEMORY: offload frees nothing real */
    int from_cache;         /**< 1: read from the cache file, not measured now */
} clremat_transfer_calibration;

/** Reads the device's calibration from the cache
 * ($XDG_CACHE_HOME/clremat/transfer-KEY.txt, KEY hashing platform, device,
 * driver and device versions and the format), else measures it (buffers made
 * directly, outside the pool, as the GEMM calibration's) and writes the
 * cache atomically. */
int clremat_transfer_calibrate(clremat_ctx *ctx, clremat_transfer_calibration *out);

/** Path of the device's cache file; 0 when no cache directory. */
int clremat_transfer_cache_file(const clremat_ctx *ctx, char *out, size_t len);

/** What offloading one byte (to the host and back) costs, in the budget
 * planner's units: milliseconds when in_ms, else FLOPs at the measured GEMM
 * rate. 0 on a host-unified device (offload gains nothing there, so no
 * planner chooses it) or without a valid measurement. */
double clremat_transfer_cost_per_byte(const clremat_transfer_calibration *c, int in_ms);

#endif
