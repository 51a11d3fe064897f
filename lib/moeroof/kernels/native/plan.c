/* The plan's kernels: the bytes partition's swap gains (gain_sums), the systematic sampler of
 * the cache traces (systematic_flat, systematic_picks) and the tokens per request of a rank
 * (pick_counts), loaded with ctypes by moeroof/kernels/plan.py (which documents each as
 * the numpy expression it replaces). C ports of the numba kernels that were there, giving their
 * results bit for bit: the numpy expression's, by the same floating-point operations in the same
 * order (ISO C, no contraction into fused multiply-adds; the sums along an outer axis
 * accumulated one by one, as numpy reduces it), but for the signs and errors noted at gain and
 * add_gain and at systematic_flat, which the numba kernels had.
 *
 * Conventions: arrays C-contiguous, of the element type declared; outputs allocated by the
 * caller. A kernel returns 0, MR_PLAN_NOMEM when malloc fails (the caller raises MemoryError),
 * or its own error code below (the caller raises the error numpy's or Python's code would). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MR_PLAN_NOMEM (-1)
#define MR_PLAN_OUT_OF_ROW 1   /* systematic_picks: a position before its row (IndexError) */
#define MR_PLAN_BEYOND_E 1     /* pick_counts: an expert id >= E; systematic_flat: an order
                                * index outside [-E, E) (IndexError) */
#define MR_PLAN_ZERO_ROW 2     /* systematic_flat: a row of pi summing to 0 (ZeroDivisionError) */

void mr_gain_sums(const double *m_in, const double *w, int64_t h, int64_t n_in, int64_t n_out,
                  double *out);
int mr_systematic_flat(const double *pi, int64_t hp, int64_t ep, const int64_t *order, int64_t n,
                       int64_t h, int64_t e, int64_t row0, int64_t k, double *flat);
int mr_systematic_picks(const double *flat, int64_t size, const double *u, const int64_t *order,
                        int64_t n, int64_t streams, int64_t h, int64_t e, int64_t row0, int64_t k,
                        int32_t *out);
int mr_pick_counts(const void *topk, int itemsize, int64_t steps, int64_t streams, int64_t h,
                   int64_t k, const uint8_t *own, int64_t e, int64_t *out, int64_t *n_out);

#if defined(__GNUC__) || defined(__clang__)
#define PLAN_INLINE static inline __attribute__((always_inline))
#else
#define PLAN_INLINE static inline
#endif

/* ---------------------------------------------------------------------------- gain_sums */

/* maximum(d, 0.0) as the numba kernel took it: d itself on NaN and on -0.0 (d < 0 is false for
 * both; numpy's maximum gives +0.0 for -0.0), else +0.0 where d < 0 */
PLAN_INLINE double gain(double d) { return d < 0.0 ? 0.0 : d; }

/* s + g, and g itself when g is NaN. Where both are NaN, IEEE leaves open which one the sum
 * carries, and compilers swap the operands of a +: the compiled numba kernel gave the new gain's
 * (its sign: -NaN where inf - inf made it, +NaN from a NaN input), kept here whatever the
 * compiler does. (numpy's own sum over the layers keeps the running sum's.) */
PLAN_INLINE double add_gain(double s, double g) { return g != g ? g : s + g; }

/* out[i, j] for the columns [j0, j1) of output row i, one by one */
static void gain_cols_exact(const double *m_in, const double *w, int64_t h, int64_t n_in,
                            int64_t n_out, int64_t i, int64_t j0, int64_t j1, double *out) {
    for (int64_t j = j0; j < j1; j++) {
        double s = gain(m_in[j] - w[i]);
        for (int64_t l = 1; l < h; l++) s = add_gain(s, gain(m_in[l * n_in + j] - w[l * n_out + i]));
        out[i * n_in + j] = s;
    }
}

#if defined(__GNUC__) || defined(__clang__)
/* The gains a vector at a time (GCC's and clang's vector extension), so that they are computed
 * without a branch (a branch on the sign of d mispredicts on real data: ~20x slower than the
 * vectorised numba kernel). Each lane does the scalar's operations: d = m - w (w broadcast as
 * it is), then gain(d) as d's bits with the mask of d < 0 cleared (+0.0 where d < 0; d itself
 * on NaN and -0.0), added in the layers' order: the same bits at any width. There is no
 * multiplication to fuse, so a wider instruction set changes no rounding. The sums are plain
 * additions, whose operands the compiler may swap: the same number unless both are NaN, and
 * then the lane ends NaN (NaN sticks), so a row with a NaN in it is summed again one by one
 * (gain_cols_exact: add_gain's NaN).
 *
 * GAIN_COLS(SUF, BYTES, ATTR) defines gain_cols##SUF: the columns [j0, j1) of every output row,
 * j1 - j0 the most whole vectors of BYTES bytes that fit in [j0, n_in); it returns j1. Row by
 * row of the output (the row stays in the first-level cache while every layer is added into
 * it), not layer by layer as the numba kernel went: each element sees the same additions in the
 * same order. ATTR names the instruction set the function may use. */
#define GAIN_COLS(SUF, BYTES, ATTR)                                                              \
    typedef double vd##SUF __attribute__((vector_size(BYTES)));                                  \
    typedef int64_t vi##SUF __attribute__((vector_size(BYTES)));                                 \
    enum { LANES##SUF = BYTES / 8 };                                                             \
    ATTR static inline vd##SUF gain_v##SUF(const double *m, double wi) {                         \
        vd##SUF d, zero = {0};                                                                   \
        memcpy(&d, m, sizeof d); /* an unaligned load */                                         \
        d -= wi;                                                                                 \
        return (vd##SUF)((vi##SUF)d & ~(vi##SUF)(d < zero));                                     \
    }                                                                                            \
    ATTR static int64_t gain_cols##SUF(const double *m_in, const double *w, int64_t h,           \
                                       int64_t n_in, int64_t n_out, int64_t j0, double *out) {   \
        const int64_t L = LANES##SUF, j1 = j0 + (n_in - j0) / L * L;                             \
        for (int64_t i = 0; i < n_out; i++) {                                                    \
            double *o = out + i * n_in;                                                          \
            for (int64_t j = j0; j < j1; j += L) {                                               \
                vd##SUF g = gain_v##SUF(m_in + j, w[i]);                                         \
                memcpy(o + j, &g, sizeof g);                                                     \
            }                                                                                    \
            for (int64_t l = 1; l < h; l++) {                                                    \
                const double *m = m_in + l * n_in;                                               \
                double wi = w[l * n_out + i];                                                    \
                for (int64_t j = j0; j < j1; j += L) {                                           \
                    vd##SUF s;                                                                   \
                    memcpy(&s, o + j, sizeof s);                                                 \
                    s += gain_v##SUF(m + j, wi);                                                 \
                    memcpy(o + j, &s, sizeof s);                                                 \
                }                                                                                \
            }                                                                                    \
            vi##SUF nan = {0};                                                                   \
            for (int64_t j = j0; j < j1; j += L) {                                               \
                vd##SUF s;                                                                       \
                memcpy(&s, o + j, sizeof s);                                                     \
                nan |= (vi##SUF)(s != s);                                                        \
            }                                                                                    \
            int64_t any[LANES##SUF], seen = 0;                                                   \
            memcpy(any, &nan, sizeof nan);                                                       \
            for (int64_t q = 0; q < L; q++) seen |= any[q];                                      \
            if (seen) gain_cols_exact(m_in, w, h, n_in, n_out, i, j0, j1, out);                  \
        }                                                                                        \
        return j1;                                                                               \
    }

/* SCALE_ROW(SUF, ATTR) defines scale_row##SUF: f[i] * scale + off over a row, a vector at a
 * time (the vectors of GAIN_COLS(SUF, ...)), the last few one by one: the product rounded, then
 * the sum, written as two statements so that no compiler fuses them into one multiply-add (ISO C
 * forbids it across statements; clang's default contracts within one). Only for instruction
 * sets without a fused multiply-add (SSE2, AVX; not AVX-512), so that no build's flags can. */
#define SCALE_ROW(SUF, ATTR)                                                                     \
    ATTR static void scale_row##SUF(double *f, int64_t e, double scale, double off) {            \
        int64_t i = 0;                                                                           \
        for (; i + LANES##SUF <= e; i += LANES##SUF) {                                           \
            vd##SUF x;                                                                           \
            memcpy(&x, f + i, sizeof x);                                                         \
            x *= scale;                                                                          \
            x += off;                                                                            \
            memcpy(f + i, &x, sizeof x);                                                         \
        }                                                                                        \
        for (; i < e; i++) {                                                                     \
            double x = f[i] * scale;                                                             \
            f[i] = x + off;                                                                      \
        }                                                                                        \
    }

/* two doubles: SSE2 or NEON, the baseline of x86-64 and arm64 (no -march) */
GAIN_COLS(_128, 16, )
#define PLAN_VECTORS 1
#if defined(__x86_64__) && defined(__ELF__)
/* wider where the CPU has them, chosen when the kernel runs (one build serves every CPU):
 * x86-64 with ELF objects (Linux, the BSDs), where __builtin_cpu_supports links (libgcc) */
#define PLAN_WIDE 1
GAIN_COLS(_256, 32, __attribute__((target("avx"))))
GAIN_COLS(_512, 64, __attribute__((target("avx512f"))))
SCALE_ROW(_256, __attribute__((target("avx"))))
#endif
#endif

/* whether the CPU running the kernel has the instruction set `isa` (x86-64 only: else 0) */
#ifdef PLAN_WIDE
#define plan_has(isa) __builtin_cpu_supports(isa)
#else
#define plan_has(isa) 0
#endif

/* the columns [j, n_in) of every output row that vectors take, the widest the CPU has first;
 * returns the first column left (the last, when an odd number of columns is left) */
static int64_t gain_vectors(const double *m_in, const double *w, int64_t h, int64_t n_in,
                            int64_t n_out, int64_t j, double *out) {
#ifdef PLAN_VECTORS
#ifdef PLAN_WIDE
    if (plan_has("avx512f"))
        j = gain_cols_512(m_in, w, h, n_in, n_out, j, out);
    else if (plan_has("avx"))
        j = gain_cols_256(m_in, w, h, n_in, n_out, j, out);
#endif
    j = gain_cols_128(m_in, w, h, n_in, n_out, j, out);
#endif
    return j;
}

/* out (n_out, n_in) = sum over the h layers of max(m_in[l, j] - w[l, i], 0), summed from the
 * first layer to the last: numpy's layer-outer sum (gain and add_gain: the numba kernel's signs
 * of zero and NaN). Vectors take what columns they can, the last one by one. */
void mr_gain_sums(const double *m_in, const double *w, int64_t h, int64_t n_in, int64_t n_out,
                  double *out) {
    if (h == 0) {
        memset(out, 0, (size_t)(n_out * n_in) * sizeof *out);
        return;
    }
    int64_t j0 = gain_vectors(m_in, w, h, n_in, n_out, 0, out);
    for (int64_t i = 0; i < n_out; i++) gain_cols_exact(m_in, w, h, n_in, n_out, i, j0, n_in, out);
}

/* ---------------------------------------------------------------------------- systematic_flat */

/* f[i] * scale + off over a row (f (e,)): the product rounded, then the sum; `wide`: AVX */
static void scale_row(double *f, int64_t e, double scale, double off, int wide) {
#ifdef PLAN_WIDE
    if (wide) {
        scale_row_256(f, e, scale, off);
        return;
    }
#endif
    (void)wide;
    for (int64_t i = 0; i < e; i++) {
        double x = f[i] * scale; /* two statements: never fused into one multiply-add */
        f[i] = x + off;
    }
}

/* an order index as numpy reads it (negative: from the end), or -1 outside [-ep, ep) */
PLAN_INLINE int64_t take_index(int64_t o, int64_t ep) {
    o = o < 0 ? o + ep : o;
    return (uint64_t)o < (uint64_t)ep ? o : -1;
}

/* f[i] = p[ord[0]] + p[ord[1]] + ... + p[ord[i]], one by one (numpy's cumsum: the first term as
 * it is, -0.0 kept); MR_PLAN_BEYOND_E at an order index outside [-ep, ep) */
static int cumsum_row(const double *p, const int64_t *ord, int64_t e, int64_t ep, double *f) {
    double c = 0.0;
    for (int64_t i = 0; i < e; i++) {
        int64_t o = take_index(ord[i], ep);
        if (o < 0) return MR_PLAN_BEYOND_E;
        if (i == 0) c = p[o]; else c += p[o];
        f[i] = c;
    }
    return 0;
}

/* cumsum_row of two rows at once: two independent chains of additions (one chain waits on each
 * addition's latency; two fill the gaps), the same sums. 0 at an order index outside [-ep, ep):
 * the caller then takes the rows one by one, which finds the first error. */
static int cumsum_rows2(const double *p1, const int64_t *o1, double *f1, const double *p2,
                        const int64_t *o2, double *f2, int64_t e, int64_t ep) {
    double c1 = 0.0, c2 = 0.0;
    for (int64_t i = 0; i < e; i++) {
        int64_t a = take_index(o1[i], ep), b = take_index(o2[i], ep);
        if ((a | b) < 0) return 0;
        if (i == 0) {
            c1 = p1[a];
            c2 = p2[b];
        } else {
            c1 += p1[a];
            c2 += p2[b];
        }
        f1[i] = c1;
        f2[i] = c2;
    }
    return 1;
}

/* a row's sums scaled to k and offset by its row index r: k / 0 is numpy's inf (with a warning)
 * but Python's ZeroDivisionError, which the compiled kernel raised: kept, so a degenerate pi is
 * an error, not infinities */
static int finish_row(double *f, int64_t e, int64_t k, int64_t r, double step, int wide) {
    if (f[e - 1] == 0.0) return MR_PLAN_ZERO_ROW;
    scale_row(f, e, (double)k / f[e - 1], (double)r * step, wide);
    return 0;
}

/* flat (n·h·e,): row r = t·h + l is the running sum of pi[l, order[t, l, i]] over i (numpy's
 * cumsum: one by one), times k / its last sum, plus (row0 + r)·(k + 1). pi is (hp, ep), hp >= h;
 * an order index counts from the end when negative, as numpy's indexing does. The rows two at a
 * time; an error is that of the first row, in order, that has one. */
int mr_systematic_flat(const double *pi, int64_t hp, int64_t ep, const int64_t *order, int64_t n,
                       int64_t h, int64_t e, int64_t row0, int64_t k, double *flat) {
    (void)hp;
    double step = (double)k + 1.0;
    int64_t rows = n * h;
    int wide = plan_has("avx");
    if (e == 0) return 0; /* no sums: the (empty) numpy expression */
    for (int64_t r = 0; r < rows;) {
        const double *p = pi + (r % h) * ep;
        int64_t start = r * e;
        int rc;
        if (r + 1 < rows && cumsum_rows2(p, order + start, flat + start, pi + ((r + 1) % h) * ep,
                                         order + start + e, flat + start + e, e, ep)) {
            if ((rc = finish_row(flat + start, e, k, row0 + r, step, wide)) != 0) return rc;
            if ((rc = finish_row(flat + start + e, e, k, row0 + r + 1, step, wide)) != 0) return rc;
            r += 2;
        } else {
            if ((rc = cumsum_row(p, order + start, e, ep, flat + start)) != 0) return rc;
            if ((rc = finish_row(flat + start, e, k, row0 + r, step, wide)) != 0) return rc;
            r += 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------- systematic_picks */

/* numpy's order of doubles: NaN after every number (and NaNs equal among themselves) */
PLAN_INLINE int before(double a, double b) { return a < b || (b != b && a == a); }

typedef struct {
    double v;
    int64_t s;
} keyed;

/* Sorts the streams by their uniform, as numpy's argsort(ub): NaN last (a NaN point sends the
 * walk back to the row's start, so where NaNs sort changes the indices on an unsorted flat).
 * Otherwise any correct sort does: streams whose uniforms tie have equal points (u + j) + off,
 * so whichever is searched first, the walk finds the same index for both (the second does not
 * move it); -0.0 and 0.0 tie too (their points are the same double). Insertion sort of runs of
 * 16, then bottom-up merges. */
static void sort_streams(keyed *a, keyed *tmp, int64_t n) {
    const int64_t run = 16;
    for (int64_t r0 = 0; r0 < n; r0 += run) {
        int64_t r1 = r0 + run < n ? r0 + run : n;
        for (int64_t x = r0 + 1; x < r1; x++) {
            keyed v = a[x];
            int64_t y = x;
            for (; y > r0 && before(v.v, a[y - 1].v); y--) a[y] = a[y - 1];
            a[y] = v;
        }
    }
    for (int64_t width = run; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t x = lo, y = mid, z = lo;
            while (x < mid && y < hi) tmp[z++] = before(a[y].v, a[x].v) ? a[y++] : a[x++];
            while (x < mid) tmp[z++] = a[x++];
            while (y < hi) tmp[z++] = a[y++];
        }
        memcpy(a, tmp, (size_t)n * sizeof *a);
    }
}

/* the first index in [lo, hi) whose value is > v (hi if none): numpy's searchsorted side right */
PLAN_INLINE int64_t search_right(const double *a, int64_t lo, int64_t hi, double v) {
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (a[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The picks of one row (step t, layer l) for every stream, taken by j and then by u (sorted in
 * `by`): the points never decrease along that order, so one walk along the row counts the
 * entries <= each point once the rows beside it lie below its smallest point and above its
 * largest (`inside`: always, for a sorted flat); else each point is searched in the whole array.
 * A point below the previous one (never, for uniforms in [0, 1)) is searched again in the row. */
static int picks_row(const double *flat, int64_t size, const double *u, const int64_t *ord,
                     const keyed *by, int64_t streams, int64_t h, int64_t e, int64_t k,
                     int64_t start, double off, int32_t *out) {
    int64_t stop = start + e, p = start;
    double lowest = (by[0].v + 0.0) + off, highest = (by[streams - 1].v + (double)(k - 1)) + off;
    int inside = (start == 0 || flat[start - 1] <= lowest) && (stop == size || flat[stop] > highest);
    double prev = -INFINITY;
    for (int64_t j = 0; j < k; j++) {
        for (int64_t q = 0; q < streams; q++) {
            int64_t s = by[q].s, idx;
            double pt = (u[s * h] + (double)j) + off;
            if (!inside) {
                idx = search_right(flat, 0, size, pt);
            } else {
                if (!(pt >= prev)) p = search_right(flat, start, stop, pt);
                while (p < stop && flat[p] <= pt) p++;
                idx = p;
                prev = pt;
            }
            int64_t pos = idx - start < e - 1 ? idx - start : e - 1;
            if (pos < 0) pos += e; /* numpy's take_along_axis counts a negative index from the end */
            if (pos < 0) return MR_PLAN_OUT_OF_ROW;
            out[(s * h) * k + j] = (int32_t)ord[pos];
        }
    }
    return 0;
}

/* out (n, streams, h, k) int32: pick j of stream s at (t, l) is order[t, l, pos], pos the index
 * of ((u[t, s, l] + j) + (row0 + t·h + l)·(k + 1)) in flat (side right), made relative to the
 * row (t·h + l)·e, clamped to e - 1. u is (n, streams, h), order (n, h, e), flat (size,). */
int mr_systematic_picks(const double *flat, int64_t size, const double *u, const int64_t *order,
                        int64_t n, int64_t streams, int64_t h, int64_t e, int64_t row0, int64_t k,
                        int32_t *out) {
    if (streams == 0 || k == 0) return 0; /* no picks */
    keyed *by = malloc((size_t)streams * sizeof *by), *tmp = malloc((size_t)streams * sizeof *tmp);
    int rc = MR_PLAN_NOMEM;
    if (!by || !tmp) goto done;
    double step = (double)k + 1.0;
    rc = 0;
    for (int64_t t = 0; t < n && rc == 0; t++) {
        const double *ut = u + t * streams * h;
        for (int64_t l = 0; l < h && rc == 0; l++) {
            int64_t local = t * h + l;
            for (int64_t s = 0; s < streams; s++) by[s] = (keyed){ut[s * h + l], s};
            sort_streams(by, tmp, streams);
            rc = picks_row(flat, size, ut + l, order + local * e, by, streams, h, e, k, local * e,
                           (double)(row0 + local) * step, out + (t * streams * h + l) * k);
        }
    }
done:
    free(by);
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------- pick_counts */

PLAN_INLINE int64_t id_at(const void *a, int itemsize, int64_t i) {
    switch (itemsize) {
        case 1: return ((const int8_t *)a)[i];
        case 2: return ((const int16_t *)a)[i];
        case 4: return ((const int32_t *)a)[i];
        default: return ((const int64_t *)a)[i];
    }
}

/* The counts of one (step, layer): the owned experts its picks name (seen[x] picks each, ids[]
 * the m distinct ones in the order met), written to out in expert order and seen cleared. Few
 * distinct against E: sorted (insertion) rather than all E scanned; the same counts either way. */
static int64_t flush_counts(int64_t *seen, int64_t *ids, int64_t m, int64_t e, int64_t *out) {
    int64_t n = 0;
    if (m * 8 < e) {
        for (int64_t a = 1; a < m; a++) {
            int64_t v = ids[a], b = a;
            for (; b > 0 && ids[b - 1] > v; b--) ids[b] = ids[b - 1];
            ids[b] = v;
        }
        for (int64_t a = 0; a < m; a++) {
            out[n++] = seen[ids[a]];
            seen[ids[a]] = 0;
        }
    } else {
        for (int64_t i = 0; i < e; i++) {
            if (seen[i] > 0) {
                out[n++] = seen[i];
                seen[i] = 0;
            }
        }
    }
    return n;
}

/* the kernel for one id type (itemsize a constant where it is called: specialised) */
PLAN_INLINE int pick_counts_body(const void *topk, int itemsize, int64_t steps, int64_t streams,
                                 int64_t h, int64_t k, const uint8_t *own, int64_t e, int64_t *out,
                                 int64_t *n_out, int64_t *seen, int64_t *ids) {
    int64_t n = 0;
    for (int64_t t = 0; t < steps; t++) {
        for (int64_t l = 0; l < h; l++) {
            int64_t m = 0;
            for (int64_t s = 0; s < streams; s++) {
                int64_t base = ((t * streams + s) * h + l) * k;
                for (int64_t j = 0; j < k; j++) {
                    int64_t x = id_at(topk, itemsize, base + j);
                    if (x >= e) return MR_PLAN_BEYOND_E;
                    if (x >= 0 && own[x]) { /* a negative id: a finished stream's padding */
                        if (seen[x] == 0) ids[m++] = x;
                        seen[x]++;
                    }
                }
            }
            n += flush_counts(seen, ids, m, e, out + n);
        }
    }
    *n_out = n;
    return 0;
}

/* topk (steps, streams, h, k) of signed ids of `itemsize` bytes, own (e,) flags; out has room
 * for every pick (steps·streams·h·k), *n_out the counts written: those of np.unique over the
 * keys step·h·e + layer·e + expert of the owned picks, in the keys' order. */
int mr_pick_counts(const void *topk, int itemsize, int64_t steps, int64_t streams, int64_t h,
                   int64_t k, const uint8_t *own, int64_t e, int64_t *out, int64_t *n_out) {
    int64_t *seen = calloc((size_t)(e > 0 ? e : 1), sizeof *seen);
    int64_t *ids = malloc((size_t)(streams * k > 0 ? streams * k : 1) * sizeof *ids);
    int rc = MR_PLAN_NOMEM;
    *n_out = 0;
    if (!seen || !ids) goto done;
#define BODY(SZ) pick_counts_body(topk, SZ, steps, streams, h, k, own, e, out, n_out, seen, ids)
    switch (itemsize) {
        case 1: rc = BODY(1); break;
        case 2: rc = BODY(2); break;
        case 4: rc = BODY(4); break;
        default: rc = BODY(8); break;
    }
#undef BODY
done:
    free(seen);
    free(ids);
    return rc;
}
