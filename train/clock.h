/* The trainer's clock (train/ and train/model use only the public API, so they keep their
 * own rather than harness/'s measure_now). Header-only: dft_model and dft_train both use it. */
#ifndef DFT_TRAIN_CLOCK_H
#define DFT_TRAIN_CLOCK_H

#include <time.h>

/* Monotonic seconds. */
static inline double dft_now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
