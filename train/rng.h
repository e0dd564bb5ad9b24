/* The trainer's random numbers: the splitmix64 finaliser as a hash, so that every random
 * value is a pure function of (seed, index) — the initial weights (train/model) and the data
 * (train/data.c) — and a resumed run draws exactly what an uninterrupted one would.
 * Header-only: dft_model and dft_train both use it. */
#ifndef DFT_TRAIN_RNG_H
#define DFT_TRAIN_RNG_H

#include <stdint.h>

#define DFT_RNG_GOLDEN 0x9e3779b97f4a7c15ull /* splitmix64's increment */

/* splitmix64 of state x: the value it returns after adding the increment to x. */
static inline uint64_t dft_rng_hash(uint64_t x) {
    uint64_t z = x + DFT_RNG_GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
