/* The request stream: scan_block, emit_block and the small helpers of
 * moeroof.kernels.cache (documented there, beside their Python wrappers). The two block kernels are
 * written once in stream_block.h and instantiated here for each id type. */
#include <stdlib.h>
#include <string.h>
#include "cache.h"

/* marks of (layer, expert) kept at once by the block kernels (int64 each: 2 MiB) */
#define MR_MARKS (1 << 18)

#define T int8_t
#define SUF(name) name##_i8
#include "stream_block.h"
#define T int16_t
#define SUF(name) name##_i16
#include "stream_block.h"
#define T int32_t
#define SUF(name) name##_i32
#include "stream_block.h"
#define T int64_t
#define SUF(name) name##_i64
#include "stream_block.h"

int64_t mr_count_runs(const uint8_t *start, int64_t n) {
    int64_t runs = 0;
    for (int64_t t = 0; t < n; t++)
        if (t == 0 || start[t]) runs++;
    return runs;
}

void mr_offsets_from_starts(const uint8_t *start, int64_t n, int64_t *off) {
    int64_t r = 0;
    for (int64_t t = 0; t < n; t++)
        if (t == 0 || start[t]) off[r++] = t;
    off[r] = n;
}

void mr_starts_from_offsets(const int64_t *off, int64_t n_lookups, int64_t n, uint8_t *out) {
    (void)n;
    for (int64_t c = 0; c < n_lookups; c++)
        if (off[c] < off[c + 1]) out[off[c]] = 1;
}

void mr_subset_offsets(const int64_t *off, int64_t n_lookups, const uint8_t *keep, int64_t *out) {
    int64_t m = 0;
    out[0] = 0;
    for (int64_t c = 0; c < n_lookups; c++) {
        for (int64_t t = off[c]; t < off[c + 1]; t++) m += keep[t] != 0;
        out[c + 1] = m;
    }
}

void mr_count_items(const int32_t *items, int64_t n, int64_t *out) {
    for (int64_t t = 0; t < n; t++) out[items[t]]++;
}

int mr_next_use(const int32_t *items, int64_t n, int64_t n_items, int32_t *out) {
    int64_t *last = malloc((n_items > 0 ? n_items : 1) * sizeof *last);
    if (!last) return -1;
    for (int64_t i = 0; i < n_items; i++) last[i] = n;
    for (int64_t t = n - 1; t >= 0; t--) {
        int32_t x = items[t];
        out[t] = (int32_t)last[x];
        last[x] = t;
    }
    free(last);
    return 0;
}

int64_t mr_longest(const int64_t *off, int64_t n_lookups) {
    int64_t m = 0;
    for (int64_t c = 0; c < n_lookups; c++)
        if (off[c + 1] - off[c] > m) m = off[c + 1] - off[c];
    return m;
}
