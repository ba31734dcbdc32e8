/* clock.h: the monotonic clock every timer in clremat reads (the planner's
 * and calibrations' measurements, the training loop's step times, the
 * HDF5 child's deadline): seconds since an arbitrary point. */
#ifndef CLREMAT_CLOCK_H
#define CLREMAT_CLOCK_H

#include <time.h>

/** Seconds on CLOCK_MONOTONIC (not affected by changes of the wall clock). */
static inline double clremat_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
