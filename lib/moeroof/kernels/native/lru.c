/* LRU, the pinned set and the LRU stack distances: lru_pass, static_pass and stack_kernel of
 * moeroof.kernels.cache (documented there, beside their Python wrappers). */
#include <stdlib.h>
#include <string.h>
#include "cache.h"
#include "kernels.h"

/* The body of mr_lru_pass; called with constant flags so that each caller is specialised. */
static inline void lru_body(const int32_t *items, const int64_t *group, int64_t n_items,
                            const double *cap, const double *size, const int64_t *off,
                            int64_t n_lookups, const int64_t *cstep, int per_request, int64_t steps,
                            const double *wsize, int weighted, uint8_t *hit_out, int64_t *hits,
                            int64_t *misses, double *streamed, int64_t *prv, int64_t *nxt,
                            uint8_t *cached, double *used, uint8_t *hbuf) {
    for (int64_t ci = 0; ci < n_lookups; ci++) {
        int64_t a = off[ci], b = off[ci + 1], st = cstep[ci];
        int counted = st >= 0 && st < steps;
        if (!per_request)
            for (int64_t u = a; u < b; u++) hbuf[u - a] = cached[items[u]];
        for (int64_t t = a; t < b; t++) {
            int32_t x = items[t];
            int h = per_request ? cached[x] : hbuf[t - a];
            tally(h, x, t, st, counted, hit_out != NULL, hit_out, hits, misses, weighted, wsize, streamed);
            int64_t g = group[x], h0 = n_items + g;
            if (cached[x]) {
                int64_t p = prv[x], q = nxt[x];
                nxt[p] = q;
                prv[q] = p;
            } else {
                double sz = size[x];
                if (sz > cap[g]) continue;
                while (used[g] + sz > cap[g]) {
                    if (prv[h0] == h0) { /* empty, the sum a rounding residue of inexact sizes */
                        used[g] = 0.0;
                        break;
                    }
                    int64_t v = prv[h0], p = prv[v];
                    nxt[p] = h0;
                    prv[h0] = p;
                    cached[v] = 0;
                    used[g] -= size[v];
                }
                cached[x] = 1;
                used[g] += sz;
            }
            int64_t q = nxt[h0];
            nxt[h0] = x;
            prv[x] = h0;
            nxt[x] = q;
            prv[q] = x;
        }
    }
}

int mr_lru_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                int64_t n_groups, const double *size, const int64_t *off, int64_t n_lookups,
                const int64_t *cstep, int per_request, int64_t steps, const double *wsize,
                int weighted, uint8_t *hit_out, int64_t *hits, int64_t *misses, double *streamed) {
    int64_t total = n_items + n_groups, lg = mr_longest(off, n_lookups);
    int64_t *prv = malloc((total > 0 ? total : 1) * sizeof *prv);
    int64_t *nxt = malloc((total > 0 ? total : 1) * sizeof *nxt);
    uint8_t *cached = calloc(n_items > 0 ? n_items : 1, 1);
    double *used = calloc(n_groups > 0 ? n_groups : 1, sizeof *used);
    uint8_t *hbuf = calloc(lg > 0 ? lg : 1, 1);
    int rc = -1;
    if (!prv || !nxt || !cached || !used || !hbuf) goto done;
    for (int64_t h0 = n_items; h0 < total; h0++) prv[h0] = nxt[h0] = h0;
#define LRU(PR, W, HO) \
    lru_body(items, group, n_items, cap, size, off, n_lookups, cstep, PR, steps, wsize, W, HO, \
             hits, misses, streamed, prv, nxt, cached, used, hbuf)
    if (hit_out)
        LRU(per_request, weighted, hit_out);
    else if (per_request)
        weighted ? LRU(1, 1, NULL) : LRU(1, 0, NULL);
    else
        weighted ? LRU(0, 1, NULL) : LRU(0, 0, NULL);
#undef LRU
    rc = 0;
done:
    free(prv);
    free(nxt);
    free(cached);
    free(used);
    free(hbuf);
    return rc;
}

int mr_static_pass(const int32_t *items, const uint8_t *mask, int64_t n_items, const int64_t *off,
                   int64_t n_lookups, const int64_t *cstep, int64_t steps, const double *wsize,
                   int weighted, uint8_t *hit_out, int64_t *hits, int64_t *misses,
                   double *streamed) {
    uint8_t *seen = calloc(n_items > 0 ? n_items : 1, 1);
    if (!seen) return -1;
    for (int64_t ci = 0; ci < n_lookups; ci++) {
        int64_t st = cstep[ci];
        int counted = st >= 0 && st < steps;
        for (int64_t t = off[ci]; t < off[ci + 1]; t++) {
            int32_t x = items[t];
            int h = mask[x] && seen[x];
            seen[x] = 1;
            tally(h, x, t, st, counted, hit_out != NULL, hit_out, hits, misses, weighted, wsize, streamed);
        }
    }
    free(seen);
    return 0;
}

/* The marks: one bit per position of the clock (a word per 64) and a Fenwick tree over the
 * words' counts, so a count of the marks up to a position reads log2(window / 64) counts and one
 * word. For the 20 480 items of a large MoE the whole structure is ~8 KiB (it stays in L1) where
 * a Fenwick tree over the positions themselves (the first version of this kernel, benchmarks/cache_ref.c) is
 * 160 KiB. The counts are exact either way: the distances are the same. */
typedef struct {
    uint64_t *bits;
    int32_t *tree; /* 1-based over the words */
    int64_t words;
} marks_t;

static inline int popcount64(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_popcountll(x);
#else
    int c = 0;
    for (; x; x &= x - 1) c++;
    return c;
#endif
}

static inline void mark_add(marks_t *m, int64_t p, int32_t d) {
    if (d > 0)
        m->bits[p >> 6] |= (uint64_t)1 << (p & 63);
    else
        m->bits[p >> 6] &= ~((uint64_t)1 << (p & 63));
    for (int64_t i = (p >> 6) + 1; i <= m->words; i += i & -i) m->tree[i] += d;
}

/* The marks at positions 0..p. */
static inline int64_t marks_upto(const marks_t *m, int64_t p) {
    int64_t w = p >> 6, s = 0;
    for (int64_t i = w; i > 0; i -= i & -i) s += m->tree[i];
    int b = (int)(p & 63);
    uint64_t mask = b == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (b + 1)) - 1);
    return s + popcount64(m->bits[w] & mask);
}

/* Renumber the live marks 0..k-1 (the clock reached the window); returns k. */
static int64_t compact(int64_t *last, int64_t *owner, marks_t *m, int64_t window) {
    int64_t k = 0;
    for (int64_t q = 0; q < window; q++) {
        int64_t o = owner[q];
        if (o >= 0) {
            owner[q] = -1;
            owner[k] = o;
            last[o] = k;
            k++;
        }
    }
    memset(m->bits, 0, m->words * sizeof *m->bits);
    memset(m->tree, 0, (m->words + 1) * sizeof *m->tree);
    for (int64_t q = 0; q < k; q++) m->bits[q >> 6] |= (uint64_t)1 << (q & 63);
    for (int64_t i = 1; i <= m->words; i++) {
        m->tree[i] += popcount64(m->bits[i - 1]);
        int64_t j = i + (i & -i);
        if (j <= m->words) m->tree[j] += m->tree[i];
    }
    return k;
}

/* The distance of a reference whose previous mark is at pu (0: a first reference): the marks
 * after pu, itself included. */
static inline int64_t distance(const marks_t *m, int64_t pu, int64_t live) {
    return pu < 0 ? 0 : live - marks_upto(m, pu) + 1;
}

/* Move x's mark to the clock's position. */
static inline void touch(int64_t *last, int64_t *owner, marks_t *m, int64_t x, int64_t *pos,
                         int64_t *live) {
    int64_t p = last[x];
    if (p < 0) {
        (*live)++;
    } else {
        mark_add(m, p, -1);
        owner[p] = -1;
    }
    mark_add(m, *pos, 1);
    owner[*pos] = x;
    last[x] = *pos;
    (*pos)++;
}

/* label NULL: the ids are their own labels (every id below n_items is present). */
int mr_stack_kernel(const int32_t *items, const int64_t *label, int64_t n_items, int64_t window,
                    const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                    int64_t warm, int64_t *out, int64_t *hist) {
    int64_t *last = malloc((n_items > 0 ? n_items : 1) * sizeof *last);
    int64_t *owner = malloc((window > 0 ? window : 1) * sizeof *owner);
    marks_t mk = {NULL, NULL, (window + 63) / 64 + 1};
    mk.bits = calloc(mk.words, sizeof *mk.bits);
    mk.tree = calloc(mk.words + 1, sizeof *mk.tree);
    marks_t *m = &mk;
    if (!last || !owner || !mk.bits || !mk.tree) {
        free(last);
        free(owner);
        free(mk.bits);
        free(mk.tree);
        return -1;
    }
    for (int64_t i = 0; i < n_items; i++) last[i] = -1;
    for (int64_t i = 0; i < window; i++) owner[i] = -1;
    int64_t pos = 0, live = 0;
#define LABEL(t) (label ? label[items[t]] : (int64_t)items[t])
    for (int64_t ci = 0; ci < n_lookups; ci++) {
        int64_t a = off[ci], b = off[ci + 1];
        int counted = hist && (warm <= 0 || cstep[ci] >= warm);
        if (per_request) {  /* each request its own lookup: the distance, then the move */
            for (int64_t t = a; t < b; t++) {
                int64_t x = LABEL(t);
                if (pos == window) pos = compact(last, owner, m, window);
                int64_t dist = distance(m, last[x], live);
                if (out) out[t] = dist;
                if (counted) hist[dist]++;
                touch(last, owner, m, x, &pos, &live);
            }
            continue;
        }
        for (int64_t t = a; t < b; t++) {  /* the lookup's distances as it starts, then the moves */
            int64_t x = LABEL(t);
            if (pos == window) pos = compact(last, owner, m, window);
            if (t == a) {
                for (int64_t u = a; u < b; u++) {
                    int64_t dist = distance(m, last[LABEL(u)], live);
                    if (out) out[u] = dist;
                    if (counted) hist[dist]++;
                }
            }
            touch(last, owner, m, x, &pos, &live);
        }
    }
#undef LABEL
    free(last);
    free(owner);
    free(mk.bits);
    free(mk.tree);
    return 0;
}
