/* Internal: storage types and their conversion to and from float32.
   bf16 and f16 round to nearest even on the way down; NaN stays NaN. */
#ifndef DFA_COMMON_DTYPE_H
#define DFA_COMMON_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "distflash.h"

static inline size_t dfa__dtype_size(dfa_dtype t) { return t == DFA_F32 ? 4u : 2u; }

static inline float dfa__bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t dfa__f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float dfa__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1fu) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t dfa__f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);           /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* overflow to inf */
    if (a < 0x38800000u) {                                             /* subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;                    /* rounds to zero */
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14..24 */
        uint32_t rounded = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (rounded & 1u))) rounded++;
        return (uint16_t)(sign | rounded);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15 */
    return (uint16_t)(sign | (r >> 13));
}

/* Converts n elements of type t at src (element offset 0) to float32. */
static inline void dfa__load_f32(dfa_dtype t, const void *src, float *dst, int64_t n) {
    if (t == DFA_F32) {
        memcpy(dst, src, (size_t)n * 4u);
    } else if (t == DFA_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = dfa__bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = dfa__f16_to_f32(s[i]);
    }
}

/* Converts n float32 values to type t at dst. */
static inline void dfa__store_f32(dfa_dtype t, const float *src, void *dst, int64_t n) {
    if (t == DFA_F32) {
        memcpy(dst, src, (size_t)n * 4u);
    } else if (t == DFA_BF16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = dfa__f32_to_bf16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = dfa__f32_to_f16(src[i]);
    }
}

/* Address of element `index` in a buffer of type t. */
static inline const void *dfa__elem_c(dfa_dtype t, const void *base, int64_t index) {
    return (const char *)base + (size_t)index * dfa__dtype_size(t);
}
static inline void *dfa__elem(dfa_dtype t, void *base, int64_t index) {
    return (char *)base + (size_t)index * dfa__dtype_size(t);
}

#endif
