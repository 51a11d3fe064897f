/* The compiled cache kernels (moeroof.kernels.cache loads them with ctypes).
 *
 * Each function is documented by its Python wrapper of the same name (without mr_) in
 * moeroof/kernels/cache.py; the tests hold each against a pure-Python reference
 * (tests/cache_refs.py): hits, misses, streamed bytes per step, hit flags, distances, errors.
 *
 * Conventions: arrays are C-contiguous, their element type as declared; a length is passed
 * beside each array whose length the kernel needs; an optional output (hit_out, out, hist) is
 * NULL when not wanted. `n_lookups` is off.size - 1 (lookup c spans requests off[c]..off[c+1]).
 * Per-step outputs (hits, misses, streamed: `steps` each) are zeroed by the caller. A kernel
 * that allocates returns 0, or -1 when malloc fails (the caller raises MemoryError).
 */
#ifndef MOEROOF_CACHE_H
#define MOEROOF_CACHE_H
#include <stdint.h>

#define MR_ID_OK 0
#define MR_ID_RANGE 1
#define MR_ID_PARTIAL 2
#define MR_ID_DUPLICATE 3

#define MR_HEAP_LFU 0
#define MR_HEAP_LFU_PERFECT 1
#define MR_HEAP_BELADY 2
#define MR_HEAP_BELADY_INSERT 3

/* ---- the request stream (stream.c); block is (ns, nt, nl, nk) of ids of type T, one function
 * per type: _i8, _i16, _i32, _i64. keep is (nl, experts) uint8, used only when use_keep. */
#define MR_BLOCK_PROTOS(SUF, T)                                                                  \
    int mr_scan_block##SUF(const T *block, int64_t ns, int64_t nt, int64_t nl, int64_t nk,      \
                           int64_t experts, const int64_t *sel, int64_t n_sel,                  \
                           const uint8_t *keep, int use_keep, int strict, int64_t *mark,        \
                           int64_t *tmark, int64_t *ctr, int32_t *cells, int64_t c0,            \
                           int64_t *err);                                                       \
    int64_t mr_emit_block##SUF(const T *block, int64_t ns, int64_t nt, int64_t nl, int64_t nk,  \
                               int64_t experts, const int64_t *sel, int64_t n_sel,              \
                               const uint8_t *keep, int use_keep, int64_t *mark, int64_t c0,    \
                               int32_t *out, int64_t pos);
MR_BLOCK_PROTOS(_i8, int8_t)
MR_BLOCK_PROTOS(_i16, int16_t)
MR_BLOCK_PROTOS(_i32, int32_t)
MR_BLOCK_PROTOS(_i64, int64_t)

/* ---- small helpers (stream.c) */
int64_t mr_count_runs(const uint8_t *start, int64_t n);                       /* lookups begun */
void mr_offsets_from_starts(const uint8_t *start, int64_t n, int64_t *off);   /* off: runs + 1 */
void mr_starts_from_offsets(const int64_t *off, int64_t n_lookups, int64_t n, uint8_t *out);
void mr_subset_offsets(const int64_t *off, int64_t n_lookups, const uint8_t *keep, int64_t *out);
void mr_count_items(const int32_t *items, int64_t n, int64_t *out);          /* out zeroed */
int mr_next_use(const int32_t *items, int64_t n, int64_t n_items, int32_t *out);
int64_t mr_longest(const int64_t *off, int64_t n_lookups);

/* ---- the policies. group (n_items,) int64 in 0..n_groups-1; cap (n_groups,) double;
 * size (n_items,) double; wsize (n_items,) double, read only when weighted. */
int mr_lru_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                int64_t n_groups, const double *size, const int64_t *off, int64_t n_lookups,
                const int64_t *cstep, int per_request, int64_t steps, const double *wsize,
                int weighted, uint8_t *hit_out, int64_t *hits, int64_t *misses, double *streamed);

int mr_static_pass(const int32_t *items, const uint8_t *mask, int64_t n_items, const int64_t *off,
                   int64_t n_lookups, const int64_t *cstep, int64_t steps, const double *wsize,
                   int weighted, uint8_t *hit_out, int64_t *hits, int64_t *misses,
                   double *streamed);

/* nexts: next_use of each request (int32), read only in the Belady modes */
int mr_heap_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                 int64_t n_groups, const double *size, int mode, const int32_t *nexts,
                 const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                 int64_t steps, const double *wsize, int weighted, uint8_t *hit_out,
                 int64_t *hits, int64_t *misses, double *streamed);

int mr_s3fifo_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                   int64_t n_groups, const double *size, double small_fraction, int64_t threshold,
                   const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                   int64_t steps, const double *wsize, int weighted, uint8_t *hit_out,
                   int64_t *hits, int64_t *misses, double *streamed);

int mr_arc_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                int64_t n_groups, const int64_t *off, int64_t n_lookups, const int64_t *cstep,
                int per_request, int64_t steps, const double *wsize, int weighted,
                uint8_t *hit_out, int64_t *hits, int64_t *misses, double *streamed);

/* label (n_items_raw,) int64 maps raw ids to 0..n_items-1; out (n,) int64 or NULL;
 * hist (n_items + 1,) int64 or NULL */
int mr_stack_kernel(const int32_t *items, const int64_t *label, int64_t n_items, int64_t window,
                    const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                    int64_t warm, int64_t *out, int64_t *hist);

#endif
