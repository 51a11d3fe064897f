/* What the compiled cache kernels share (lru.c, policies.c): the accounting of one request
 * (tally), and the dispatch that specialises a kernel's body for its flags.
 * Not an interface: cache.h is. */
#ifndef MOEROOF_KERNELS_H
#define MOEROOF_KERNELS_H
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define MR_INLINE static inline __attribute__((always_inline))
#else
#define MR_INLINE static inline
#endif

/* tally: the hit flag (when kept) and, in a counted step, a hit or a miss plus the bytes
 * it streams */
MR_INLINE void tally(int h, int32_t x, int64_t t, int64_t st, int counted, int keep_hits,
                     uint8_t *hit_out, int64_t *hits, int64_t *misses, int weighted,
                     const double *wsize, double *streamed) {
    if (keep_hits) hit_out[t] = (uint8_t)(h != 0);
    if (counted) {
        if (h) {
            hits[st] += 1;
        } else {
            misses[st] += 1;
            if (weighted) streamed[st] += wsize[x];
        }
    }
}

/* the eight specialisations of a body: BODY(per_request, weighted, keep_hits) */
#define MR_DISPATCH(CALL)                                                                        \
    do {                                                                                         \
        if (per_request) {                                                                       \
            if (weighted) {                                                                      \
                if (keep_hits) CALL(1, 1, 1); else CALL(1, 1, 0);                                \
            } else {                                                                             \
                if (keep_hits) CALL(1, 0, 1); else CALL(1, 0, 0);                                \
            }                                                                                    \
        } else {                                                                                 \
            if (weighted) {                                                                      \
                if (keep_hits) CALL(0, 1, 1); else CALL(0, 1, 0);                                \
            } else {                                                                             \
                if (keep_hits) CALL(0, 0, 1); else CALL(0, 0, 0);                                \
            }                                                                                    \
        }                                                                                        \
    } while (0)

#endif
