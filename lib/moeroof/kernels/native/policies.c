/* The heap policies (LFU, perfect LFU, Belady MIN with and without bypass), S3-FIFO and ARC:
 * heap_pass, s3fifo_pass and arc_pass of moeroof.kernels.cache (documented there, beside
 * their Python wrappers). Streamed bytes are added in request order.
 *
 * Each kernel's loop is a `static inline` body that takes per_request, weighted and keep_hits
 * (hit_out given) as parameters; the entry point calls it from eight branches with constant
 * arguments, so the compiler emits one specialised loop per combination and the flags cost
 * nothing per request.
 *
 * Where an eviction loop finds its list or heap empty while float rounding leaves the running
 * size sum above zero (possible only with sizes whose sums are inexact), it stops evicting (the
 * sum of an empty list is reset to 0); with exact sums (unit sizes, the simulator's usual case)
 * that never happens.
 */
#include <stdint.h>
#include <stdlib.h>

#include "cache.h"
#include "kernels.h"

/* floor of a double in int64 range, as an int64 */
MR_INLINE int64_t floor_i64(double v) {
    int64_t i = (int64_t)v;
    if ((double)i > v) i -= 1;
    return i;
}

static int64_t longest_lookup(const int64_t *off, int64_t n_lookups) {
    int64_t m = 0;
    for (int64_t c = 0; c < n_lookups; c++) {
        int64_t d = off[c + 1] - off[c];
        if (d > m) m = d;
    }
    return m;
}

/* the look-ahead buffer of hit flags (one per request of the longest lookup); NULL when
 * per_request. *fail set when malloc fails. */
static uint8_t *hbuf_alloc(const int64_t *off, int64_t n_lookups, int per_request, int *fail) {
    *fail = 0;
    if (per_request) return NULL;
    int64_t m = longest_lookup(off, n_lookups);
    uint8_t *p = (uint8_t *)malloc((size_t)(m > 0 ? m : 1));
    if (p == NULL) *fail = 1;
    return p;
}

/* ----------------------------------------------------------------------------- heap policies */

/* restore the min-heap order of heap[base : base + size] around local index i */
MR_INLINE void sift(int32_t *heap, int64_t *hpos, const int64_t *key, int64_t base, int64_t size,
                    int64_t i) {
    int32_t *hp = heap + base;
    int32_t x = hp[i];
    int64_t kx = key[x];
    while (i > 0) { /* up */
        int64_t parent = (i - 1) >> 1;
        int32_t y = hp[parent];
        if (key[y] <= kx) break;
        hp[i] = y;
        hpos[y] = i;
        i = parent;
    }
    for (;;) { /* down */
        int64_t c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size && key[hp[c + 1]] < key[hp[c]]) c += 1;
        int32_t y = hp[c];
        if (key[y] >= kx) break;
        hp[i] = y;
        hpos[y] = i;
        i = c;
    }
    hp[i] = x;
    hpos[x] = i;
}

typedef struct {
    const int32_t *items;
    const int64_t *group;
    const double *cap;
    const double *size;
    const int32_t *nexts;
    const int64_t *off;
    int64_t n_lookups;
    const int64_t *cstep;
    int64_t steps;
    const double *wsize;
    uint8_t *hit_out;
    int64_t *hits, *misses;
    double *streamed;
    int mode;
} heap_args;

typedef struct {
    const int64_t *hoff;
    int32_t *heap;
    int64_t *hsize, *hpos, *key, *freq;
    double *used;
    uint8_t *hbuf;
} heap_state;

MR_INLINE void heap_body(const heap_args *A, heap_state *S, const int per_request,
                         const int weighted, const int keep_hits) {
    const int32_t *items = A->items;
    const int64_t *group = A->group;
    const double *cap = A->cap;
    const double *size = A->size;
    const int32_t *nexts = A->nexts;
    const int64_t *off = A->off;
    const int64_t *cstep = A->cstep;
    const int64_t steps = A->steps;
    const double *wsize = A->wsize;
    uint8_t *hit_out = A->hit_out;
    int64_t *hits = A->hits, *misses = A->misses;
    double *streamed = A->streamed;
    const int64_t *hoff = S->hoff;
    int32_t *heap = S->heap;
    int64_t *hsize = S->hsize, *hpos = S->hpos, *key = S->key, *freq = S->freq;
    double *used = S->used;
    uint8_t *hbuf = S->hbuf;
    const int belady = A->mode >= MR_HEAP_BELADY;
    const int bypass = A->mode == MR_HEAP_BELADY;
    const int forget = A->mode == MR_HEAP_LFU;
    const int shift = A->off[A->n_lookups] < ((int64_t)1 << 31) ? 31 : 40; /* by the stream's length */

    for (int64_t ci = 0; ci < A->n_lookups; ci++) {
        const int64_t a = off[ci], b = off[ci + 1];
        const int64_t st = cstep[ci];
        const int counted = st >= 0 && st < steps;
        if (!per_request)
            for (int64_t u = a; u < b; u++) hbuf[u - a] = hpos[items[u]] >= 0;
        for (int64_t t = a; t < b; t++) {
            const int32_t x = items[t];
            const int h = per_request ? (hpos[x] >= 0) : hbuf[t - a];
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize,
                  streamed);
            const int64_t g = group[x];
            const int64_t base = hoff[g];
            int64_t k;
            if (belady) {
                k = -(int64_t)nexts[t];
            } else {
                freq[x] += 1;
                /* freq · 2^shift + t: (count, time) in order, no overflow */
                k = (int64_t)(((uint64_t)freq[x] << shift) | (uint64_t)t);
            }
            if (hpos[x] >= 0) {
                key[x] = k;
                sift(heap, hpos, key, base, hsize[g], hpos[x]);
                continue;
            }
            const double sz = size[x];
            if (sz > cap[g]) continue;
            while (used[g] + sz > cap[g]) {
                if (hsize[g] <= 0) { /* empty, the sum a rounding residue (see the top) */
                    used[g] = 0.0;
                    break;
                }
                const int32_t top = heap[base];
                if (bypass && key[top] >= k) break; /* every cached item is needed no later */
                hsize[g] -= 1;
                const int32_t last = heap[base + hsize[g]];
                hpos[top] = -1;
                used[g] -= size[top];
                if (forget) freq[top] = 0; /* in-cache LFU: the item comes back with a count of 1 */
                if (last != top) {
                    heap[base] = last;
                    hpos[last] = 0;
                    sift(heap, hpos, key, base, hsize[g], 0);
                }
            }
            if (used[g] + sz > cap[g]) continue;
            key[x] = k;
            const int64_t i = hsize[g];
            hsize[g] += 1;
            heap[base + i] = x;
            hpos[x] = i;
            used[g] += sz;
            sift(heap, hpos, key, base, hsize[g], i);
        }
    }
}

/* ----------------------------------------------------------------------------- in-cache LFU
 *
 * The heap's in-cache LFU (mode MR_HEAP_LFU) in O(1) a request (Shah, Mitra & Matani 2010): per
 * group, a list of frequency buckets in ascending count, each an LRU list of the cached items
 * with that count (appended as they reach it, so its head is the least recently used). The
 * heap's key, count · 2^31 + time of the last request, orders items by count, then by that time:
 * evicting the head of the first bucket evicts the heap's minimum, so the hits are the heap's.
 * Bucket nodes: 0..n_items (one per cached item at most, and one more: a hit makes the next
 * bucket before it may free its own), the groups' sentinels after them. */
typedef struct {
    int64_t *bf, *bp, *bn, *ih, *it; /* bucket: count, prev/next bucket, first/last item */
    int64_t *freelist, nfree;
    int64_t *ip, *in, *ib; /* item: prev/next in its bucket, its bucket (-1: not cached) */
} lfu_t;

MR_INLINE int64_t lfu_new_bucket(lfu_t *L, int64_t after, int64_t f) {
    int64_t b = L->freelist[--L->nfree], n = L->bn[after];
    L->bf[b] = f;
    L->ih[b] = L->it[b] = -1;
    L->bp[b] = after;
    L->bn[b] = n;
    L->bn[after] = b;
    L->bp[n] = b;
    return b;
}

MR_INLINE void lfu_append(lfu_t *L, int64_t b, int64_t x) {
    int64_t t = L->it[b];
    L->ip[x] = t;
    L->in[x] = -1;
    if (t >= 0)
        L->in[t] = x;
    else
        L->ih[b] = x;
    L->it[b] = x;
    L->ib[x] = b;
}

/* take x out of its bucket; an emptied bucket leaves the list */
MR_INLINE void lfu_remove(lfu_t *L, int64_t x) {
    int64_t b = L->ib[x], p = L->ip[x], n = L->in[x];
    if (p >= 0)
        L->in[p] = n;
    else
        L->ih[b] = n;
    if (n >= 0)
        L->ip[n] = p;
    else
        L->it[b] = p;
    L->ib[x] = -1;
    if (L->ih[b] < 0) {
        int64_t bp = L->bp[b], bn = L->bn[b];
        L->bn[bp] = bn;
        L->bp[bn] = bp;
        L->freelist[L->nfree++] = b;
    }
}

MR_INLINE void lfu_body(const heap_args *A, lfu_t *L, int64_t n_items, int64_t *freq, double *used,
                        uint8_t *hbuf, const int per_request, const int weighted,
                        const int keep_hits) {
    const int32_t *items = A->items;
    const int64_t *group = A->group, *off = A->off, *cstep = A->cstep;
    const double *cap = A->cap, *size = A->size, *wsize = A->wsize;
    for (int64_t ci = 0; ci < A->n_lookups; ci++) {
        const int64_t a = off[ci], b = off[ci + 1], st = cstep[ci];
        const int counted = st >= 0 && st < A->steps;
        if (!per_request)
            for (int64_t u = a; u < b; u++) hbuf[u - a] = L->ib[items[u]] >= 0;
        for (int64_t t = a; t < b; t++) {
            const int32_t x = items[t];
            const int h = per_request ? (L->ib[x] >= 0) : hbuf[t - a];
            tally(h, x, t, st, counted, keep_hits, A->hit_out, A->hits, A->misses, weighted, wsize,
                  A->streamed);
            const int64_t g = group[x], sentinel = n_items + 1 + g;
            const int64_t f = ++freq[x];
            if (L->ib[x] >= 0) { /* a hit: up one bucket, at its most recent end */
                int64_t cur = L->ib[x], nx = L->bn[cur];
                int64_t to = (nx != sentinel && L->bf[nx] == f) ? nx : lfu_new_bucket(L, cur, f);
                lfu_remove(L, x);
                lfu_append(L, to, x);
                continue;
            }
            const double sz = size[x];
            if (sz > cap[g]) continue;
            while (used[g] + sz > cap[g]) {
                int64_t first = L->bn[sentinel];
                if (first == sentinel) { /* empty, the sum a rounding residue (see the top) */
                    used[g] = 0.0;
                    break;
                }
                int64_t v = L->ih[first];
                lfu_remove(L, v);
                used[g] -= size[v];
                freq[v] = 0; /* in-cache LFU: the item comes back with a count of 1 */
            }
            if (used[g] + sz > cap[g]) continue;
            int64_t at = sentinel; /* the bucket of count f, or where it goes (f is 1 but for an
                                      item once too big to fit: its count ran on) */
            while (L->bn[at] != sentinel && L->bf[L->bn[at]] < f) at = L->bn[at];
            int64_t nx = L->bn[at];
            lfu_append(L, (nx != sentinel && L->bf[nx] == f) ? nx : lfu_new_bucket(L, at, f), x);
            used[g] += sz;
        }
    }
}

static int lfu_pass(const heap_args *A, int64_t n_items, int64_t n_groups, int per_request,
                    int weighted) {
    size_t ni = (size_t)(n_items > 0 ? n_items : 1), nb = ni + 1 + (size_t)(n_groups > 0 ? n_groups : 1);
    lfu_t L;
    L.bf = (int64_t *)malloc(nb * sizeof(int64_t));
    L.bp = (int64_t *)malloc(nb * sizeof(int64_t));
    L.bn = (int64_t *)malloc(nb * sizeof(int64_t));
    L.ih = (int64_t *)malloc(nb * sizeof(int64_t));
    L.it = (int64_t *)malloc(nb * sizeof(int64_t));
    L.freelist = (int64_t *)malloc((ni + 1) * sizeof(int64_t));
    L.ip = (int64_t *)malloc(ni * sizeof(int64_t));
    L.in = (int64_t *)malloc(ni * sizeof(int64_t));
    L.ib = (int64_t *)malloc(ni * sizeof(int64_t));
    int64_t *freq = (int64_t *)calloc(ni, sizeof(int64_t));
    double *used = (double *)calloc((size_t)(n_groups > 0 ? n_groups : 1), sizeof(double));
    int fail;
    uint8_t *hbuf = hbuf_alloc(A->off, A->n_lookups, per_request, &fail);
    int rc = -1;
    if (!L.bf || !L.bp || !L.bn || !L.ih || !L.it || !L.freelist || !L.ip || !L.in || !L.ib ||
        !freq || !used || fail)
        goto done;
    L.nfree = n_items + 1;
    for (int64_t i = 0; i <= n_items; i++) L.freelist[i] = n_items - i;
    for (int64_t i = 0; i < n_items; i++) L.ib[i] = -1;
    for (int64_t g = 0; g < n_groups; g++) {
        int64_t s0 = n_items + 1 + g;
        L.bp[s0] = L.bn[s0] = s0;
        L.bf[s0] = -1;
    }
    {
        const int keep_hits = A->hit_out != NULL;
#define MR_LFU_CALL(P, W, K) lfu_body(A, &L, n_items, freq, used, hbuf, P, W, K)
        MR_DISPATCH(MR_LFU_CALL);
#undef MR_LFU_CALL
    }
    rc = 0;
done:
    free(L.bf);
    free(L.bp);
    free(L.bn);
    free(L.ih);
    free(L.it);
    free(L.freelist);
    free(L.ip);
    free(L.in);
    free(L.ib);
    free(freq);
    free(used);
    free(hbuf);
    return rc;
}

int mr_heap_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                 int64_t n_groups, const double *size, int mode, const int32_t *nexts,
                 const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                 int64_t steps, const double *wsize, int weighted, uint8_t *hit_out,
                 int64_t *hits, int64_t *misses, double *streamed) {
    heap_args A = {items, group, cap, size, nexts, off, n_lookups, cstep, steps, wsize, hit_out,
                   hits, misses, streamed, mode};
    if (mode == MR_HEAP_LFU) return lfu_pass(&A, n_items, n_groups, per_request, weighted);
    heap_state S;
    size_t ni = (size_t)(n_items > 0 ? n_items : 1), ng = (size_t)(n_groups > 0 ? n_groups : 1);
    int64_t *hoff = (int64_t *)calloc(ng + 1, sizeof(int64_t));
    int32_t *heap = (int32_t *)malloc(ni * sizeof(int32_t));
    int64_t *hsize = (int64_t *)calloc(ng, sizeof(int64_t));
    int64_t *hpos = (int64_t *)malloc(ni * sizeof(int64_t));
    int64_t *key = (int64_t *)calloc(ni, sizeof(int64_t));
    int64_t *freq = (int64_t *)calloc(ni, sizeof(int64_t));
    double *used = (double *)calloc(ng, sizeof(double));
    int fail;
    uint8_t *hbuf = hbuf_alloc(off, n_lookups, per_request, &fail);
    int rc = -1;
    if (!hoff || !heap || !hsize || !hpos || !key || !freq || !used || fail) goto done;
    for (int64_t x = 0; x < n_items; x++) {
        hoff[group[x] + 1] += 1;
        hpos[x] = -1;
    }
    for (int64_t g = 0; g < n_groups; g++) hoff[g + 1] += hoff[g];
    S.hoff = hoff;
    S.heap = heap;
    S.hsize = hsize;
    S.hpos = hpos;
    S.key = key;
    S.freq = freq;
    S.used = used;
    S.hbuf = hbuf;
    {
        const int keep_hits = hit_out != NULL;
#define MR_HEAP_CALL(P, W, K) heap_body(&A, &S, P, W, K)
        MR_DISPATCH(MR_HEAP_CALL);
#undef MR_HEAP_CALL
    }
    rc = 0;
done:
    free(hoff);
    free(heap);
    free(hsize);
    free(hpos);
    free(key);
    free(freq);
    free(used);
    free(hbuf);
    return rc;
}

/* ----------------------------------------------------------------------------- linked lists */

/* the lists: doubly linked through prv/nxt, sentinel nodes after the items; a list's MRU end is
 * nxt[sentinel], its LRU end prv[sentinel] */
MR_INLINE void unlink_node(int64_t *prv, int64_t *nxt, int64_t x) {
    int64_t p = prv[x], q = nxt[x];
    nxt[p] = q;
    prv[q] = p;
}

MR_INLINE void push_front(int64_t *prv, int64_t *nxt, int64_t head, int64_t x) {
    int64_t q = nxt[head];
    nxt[head] = x;
    prv[x] = head;
    nxt[x] = q;
    prv[q] = x;
}

/* take the LRU end of the list `head` off it (the list is not empty) and return it */
MR_INLINE int64_t pop_back(int64_t *prv, int64_t *nxt, int64_t head) {
    int64_t v = prv[head];
    int64_t p = prv[v];
    nxt[p] = head;
    prv[head] = p;
    return v;
}

static int lists_alloc(int64_t total, int64_t n_items, int64_t **prv, int64_t **nxt) {
    size_t n = (size_t)(total > 0 ? total : 1);
    *prv = (int64_t *)malloc(n * sizeof(int64_t));
    *nxt = (int64_t *)malloc(n * sizeof(int64_t));
    if (!*prv || !*nxt) return -1;
    for (int64_t s = n_items; s < total; s++) {
        (*prv)[s] = s;
        (*nxt)[s] = s;
    }
    return 0;
}

/* ----------------------------------------------------------------------------- S3-FIFO */

typedef struct {
    const int32_t *items;
    const int64_t *group;
    int64_t n_items;
    const double *cap;
    const double *size;
    double small_fraction;
    int64_t threshold;
    const int64_t *off;
    int64_t n_lookups;
    const int64_t *cstep;
    int64_t steps;
    const double *wsize;
    uint8_t *hit_out;
    int64_t *hits, *misses;
    double *streamed;
} s3_args;

typedef struct {
    int64_t *prv, *nxt;
    int8_t *where; /* 0 none, 1 S, 2 M, 3 G */
    int64_t *freq;
    double *sb, *mb, *gb;
    uint8_t *hbuf;
} s3_state;

MR_INLINE void s3fifo_body(const s3_args *A, s3_state *S, const int per_request,
                           const int weighted, const int keep_hits) {
    const int32_t *items = A->items;
    const int64_t *group = A->group;
    const int64_t n_items = A->n_items;
    const double *cap = A->cap;
    const double *size = A->size;
    const double small_fraction = A->small_fraction;
    const int64_t threshold = A->threshold;
    const int64_t *off = A->off;
    const int64_t *cstep = A->cstep;
    const int64_t steps = A->steps;
    const double *wsize = A->wsize;
    uint8_t *hit_out = A->hit_out;
    int64_t *hits = A->hits, *misses = A->misses;
    double *streamed = A->streamed;
    int64_t *prv = S->prv, *nxt = S->nxt;
    int8_t *where = S->where;
    int64_t *freq = S->freq;
    double *sb = S->sb, *mb = S->mb, *gb = S->gb;
    uint8_t *hbuf = S->hbuf;
    const int64_t fmax = threshold > 3 ? threshold : 3;

    for (int64_t ci = 0; ci < A->n_lookups; ci++) {
        const int64_t a = off[ci], b = off[ci + 1];
        const int64_t st = cstep[ci];
        const int counted = st >= 0 && st < steps;
        if (!per_request)
            for (int64_t u = a; u < b; u++) {
                const int8_t wu = where[items[u]];
                hbuf[u - a] = wu == 1 || wu == 2;
            }
        for (int64_t t = a; t < b; t++) {
            const int32_t x = items[t];
            const int8_t w = where[x];
            const int h = per_request ? (w == 1 || w == 2) : hbuf[t - a];
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize,
                  streamed);
            const int64_t g = group[x];
            if (w == 1 || w == 2) {
                if (freq[x] < fmax) freq[x] += 1;
                continue;
            }
            const double sz = size[x];
            const double c = cap[g];
            if (sz > c) continue;
            const int64_t hs = n_items + 3 * g, hm = hs + 1, hg = hs + 2;
            if (w == 3) { /* leave the ghost before any eviction can trim it */
                unlink_node(prv, nxt, x);
                gb[g] -= size[x];
                where[x] = 0;
            }
            /* libCacheSim: (int64_t)(size · ratio) */
            const double main_cap = c - (double)floor_i64(small_fraction * c);
            while (sb[g] + mb[g] + sz > c) {
                if (sb[g] > 0 && mb[g] <= main_cap) {
                    int evicted = 0;
                    while (!evicted && sb[g] > 0) {
                        if (prv[hs] == hs) { /* S empty, sb a rounding residue (see the top) */
                            sb[g] = 0.0;
                            break;
                        }
                        const int64_t v = pop_back(prv, nxt, hs);
                        int64_t dest;
                        sb[g] -= size[v];
                        if (freq[v] >= threshold) {
                            dest = hm;
                            where[v] = 2;
                            freq[v] = 0;
                            mb[g] += size[v];
                        } else {
                            dest = hg;
                            where[v] = 3;
                            gb[g] += size[v];
                            evicted = 1;
                        }
                        push_front(prv, nxt, dest, v);
                        if (evicted) {
                            while (gb[g] > (1.0 - small_fraction) * c) {
                                if (prv[hg] == hg) { /* G empty (see the top) */
                                    gb[g] = 0.0;
                                    break;
                                }
                                const int64_t u = pop_back(prv, nxt, hg);
                                gb[g] -= size[u];
                                where[u] = 0;
                            }
                        }
                    }
                } else {
                    for (;;) {
                        if (prv[hm] == hm) { /* M empty (see the top) */
                            mb[g] = 0.0;
                            break;
                        }
                        const int64_t v = pop_back(prv, nxt, hm);
                        const int64_t f = freq[v];
                        if (f > 0) {
                            freq[v] = (f < 3 ? f : 3) - 1;
                            push_front(prv, nxt, hm, v);
                        } else {
                            mb[g] -= size[v];
                            where[v] = 0;
                            break;
                        }
                    }
                }
            }
            int64_t dest;
            if (w == 3) {
                dest = hm;
                mb[g] += sz;
                where[x] = 2;
            } else {
                dest = hs;
                sb[g] += sz;
                where[x] = 1;
            }
            freq[x] = 0;
            push_front(prv, nxt, dest, x);
        }
    }
}

int mr_s3fifo_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                   int64_t n_groups, const double *size, double small_fraction, int64_t threshold,
                   const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                   int64_t steps, const double *wsize, int weighted, uint8_t *hit_out,
                   int64_t *hits, int64_t *misses, double *streamed) {
    s3_args A = {items, group, n_items, cap, size, small_fraction, threshold, off, n_lookups,
                 cstep, steps, wsize, hit_out, hits, misses, streamed};
    s3_state S;
    size_t ni = (size_t)(n_items > 0 ? n_items : 1), ng = (size_t)(n_groups > 0 ? n_groups : 1);
    int64_t *prv = NULL, *nxt = NULL;
    int lfail = lists_alloc(n_items + 3 * n_groups, n_items, &prv, &nxt);
    int8_t *where = (int8_t *)calloc(ni, sizeof(int8_t));
    int64_t *freq = (int64_t *)calloc(ni, sizeof(int64_t));
    double *sb = (double *)calloc(ng, sizeof(double));
    double *mb = (double *)calloc(ng, sizeof(double));
    double *gb = (double *)calloc(ng, sizeof(double));
    int fail;
    uint8_t *hbuf = hbuf_alloc(off, n_lookups, per_request, &fail);
    int rc = -1;
    if (lfail || !where || !freq || !sb || !mb || !gb || fail) goto done;
    S.prv = prv;
    S.nxt = nxt;
    S.where = where;
    S.freq = freq;
    S.sb = sb;
    S.mb = mb;
    S.gb = gb;
    S.hbuf = hbuf;
    {
        const int keep_hits = hit_out != NULL;
#define MR_S3_CALL(P, W, K) s3fifo_body(&A, &S, P, W, K)
        MR_DISPATCH(MR_S3_CALL);
#undef MR_S3_CALL
    }
    rc = 0;
done:
    free(prv);
    free(nxt);
    free(where);
    free(freq);
    free(sb);
    free(mb);
    free(gb);
    free(hbuf);
    return rc;
}

/* ----------------------------------------------------------------------------- ARC */

typedef struct {
    const int32_t *items;
    const int64_t *group;
    int64_t n_items;
    const double *cap;
    const int64_t *off;
    int64_t n_lookups;
    const int64_t *cstep;
    int64_t steps;
    const double *wsize;
    uint8_t *hit_out;
    int64_t *hits, *misses;
    double *streamed;
} arc_args;

typedef struct {
    int64_t *prv, *nxt;
    int8_t *where;    /* 0 none, 1 T1, 2 T2, 3 B1, 4 B2 */
    int64_t *length;  /* (4 · n_groups): T1, T2, B1, B2 per group */
    double *p_target; /* T1's target size per group */
    uint8_t *hbuf;
} arc_state;

MR_INLINE double max_d(double u, double v) { return u > v ? u : v; }
MR_INLINE double min_d(double u, double v) { return u < v ? u : v; }

MR_INLINE void arc_body(const arc_args *A, arc_state *S, const int per_request,
                        const int weighted, const int keep_hits) {
    const int32_t *items = A->items;
    const int64_t *group = A->group;
    const int64_t n_items = A->n_items;
    const double *cap = A->cap;
    const int64_t *off = A->off;
    const int64_t *cstep = A->cstep;
    const int64_t steps = A->steps;
    const double *wsize = A->wsize;
    uint8_t *hit_out = A->hit_out;
    int64_t *hits = A->hits, *misses = A->misses;
    double *streamed = A->streamed;
    int64_t *prv = S->prv, *nxt = S->nxt;
    int8_t *where = S->where;
    int64_t *length = S->length;
    double *p_target = S->p_target;
    uint8_t *hbuf = S->hbuf;

    for (int64_t ci = 0; ci < A->n_lookups; ci++) {
        const int64_t a = off[ci], b = off[ci + 1];
        const int64_t st = cstep[ci];
        const int counted = st >= 0 && st < steps;
        if (!per_request)
            for (int64_t u = a; u < b; u++) {
                const int32_t xu = items[u];
                const int8_t wu = where[xu];
                hbuf[u - a] = (wu == 1 || wu == 2) && cap[group[xu]] >= 1;
            }
        for (int64_t t = a; t < b; t++) {
            const int32_t x = items[t];
            const int64_t g = group[x];
            const int8_t w = where[x];
            const int h = per_request ? ((w == 1 || w == 2) && cap[g] >= 1) : hbuf[t - a];
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize,
                  streamed);
            const int64_t c = (int64_t)cap[g];
            if (c <= 0) continue;
            const int64_t h0 = n_items + 4 * g; /* T1, T2, B1, B2 sentinels at h0 + 0..3 */
            int64_t *len = length + 4 * g;
            if (w == 3) {
                double d = max_d(1.0, (double)len[3] / (double)(len[2] > 1 ? len[2] : 1));
                p_target[g] = min_d(p_target[g] + d, (double)c);
            } else if (w == 4) {
                double d = max_d(1.0, (double)len[2] / (double)(len[3] > 1 ? len[3] : 1));
                p_target[g] = max_d(p_target[g] - d, 0.0);
            }
            int need_replace;
            if (w != 0) { /* unlink from its list */
                unlink_node(prv, nxt, x);
                len[w - 1] -= 1;
                need_replace = w >= 3;
            } else {
                const int64_t l1 = len[0] + len[2];
                if (l1 == c) {
                    if (len[0] < c) { /* drop B1's LRU, then REPLACE */
                        const int64_t u = pop_back(prv, nxt, h0 + 2);
                        len[2] -= 1;
                        where[u] = 0;
                        need_replace = 1;
                    } else { /* drop T1's LRU outright */
                        const int64_t u = pop_back(prv, nxt, h0);
                        len[0] -= 1;
                        where[u] = 0;
                        need_replace = 0;
                    }
                } else {
                    const int64_t tot = l1 + len[1] + len[3];
                    if (tot >= c) {
                        if (tot == 2 * c) { /* drop B2's LRU */
                            const int64_t u = pop_back(prv, nxt, h0 + 3);
                            len[3] -= 1;
                            where[u] = 0;
                        }
                        need_replace = 1;
                    } else {
                        need_replace = 0;
                    }
                }
            }
            if (need_replace && len[0] + len[1] >= c) {
                const int64_t t1 = len[0];
                int64_t src, dst;
                int8_t wd;
                if (t1 >= 1 && ((double)t1 > p_target[g] || (w == 4 && (double)t1 == p_target[g]))) {
                    src = h0;
                    dst = h0 + 2;
                    wd = 3;
                } else {
                    src = h0 + 1;
                    dst = h0 + 3;
                    wd = 4;
                }
                const int64_t u = pop_back(prv, nxt, src);
                len[src - h0] -= 1;
                push_front(prv, nxt, dst, u);
                len[wd - 1] += 1;
                where[u] = wd;
            }
            /* new items to T1, everything seen before to T2 */
            const int64_t dest = w == 0 ? h0 : h0 + 1;
            push_front(prv, nxt, dest, x);
            len[dest - h0] += 1;
            where[x] = w == 0 ? 1 : 2;
        }
    }
}

int mr_arc_pass(const int32_t *items, const int64_t *group, int64_t n_items, const double *cap,
                int64_t n_groups, const int64_t *off, int64_t n_lookups, const int64_t *cstep,
                int per_request, int64_t steps, const double *wsize, int weighted,
                uint8_t *hit_out, int64_t *hits, int64_t *misses, double *streamed) {
    arc_args A = {items, group, n_items, cap, off, n_lookups, cstep, steps, wsize, hit_out,
                  hits, misses, streamed};
    arc_state S;
    size_t ni = (size_t)(n_items > 0 ? n_items : 1), ng = (size_t)(n_groups > 0 ? n_groups : 1);
    int64_t *prv = NULL, *nxt = NULL;
    int lfail = lists_alloc(n_items + 4 * n_groups, n_items, &prv, &nxt);
    int8_t *where = (int8_t *)calloc(ni, sizeof(int8_t));
    int64_t *length = (int64_t *)calloc(4 * ng, sizeof(int64_t));
    double *p_target = (double *)calloc(ng, sizeof(double));
    int fail;
    uint8_t *hbuf = hbuf_alloc(off, n_lookups, per_request, &fail);
    int rc = -1;
    if (lfail || !where || !length || !p_target || fail) goto done;
    S.prv = prv;
    S.nxt = nxt;
    S.where = where;
    S.length = length;
    S.p_target = p_target;
    S.hbuf = hbuf;
    {
        const int keep_hits = hit_out != NULL;
#define MR_ARC_CALL(P, W, K) arc_body(&A, &S, P, W, K)
        MR_DISPATCH(MR_ARC_CALL);
#undef MR_ARC_CALL
    }
    rc = 0;
done:
    free(prv);
    free(nxt);
    free(where);
    free(length);
    free(p_target);
    free(hbuf);
    return rc;
}
