/* LRU, the pinned set and the LRU stack distances: C ports of lru_pass, static_pass and
 * stack_kernel of moeroof/models/cache_kernels.py (documented there), bit for bit. */
#include <stdlib.h>
#include <string.h>
#include "cache.h"

/* One request's outcome, as cache_kernels.tally. */
static inline void tally(int h, int32_t x, int64_t t, int64_t st, int counted, uint8_t *hit_out,
                         int64_t *hits, int64_t *misses, int weighted, const double *wsize,
                         double *streamed) {
    if (hit_out) hit_out[t] = (uint8_t)h;
    if (counted) {
        if (h) {
            hits[st]++;
        } else {
            misses[st]++;
            if (weighted) streamed[st] += wsize[x];
        }
    }
}

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
            tally(h, x, t, st, counted, hit_out, hits, misses, weighted, wsize, streamed);
            int64_t g = group[x], h0 = n_items + g;
            if (cached[x]) {
                int64_t p = prv[x], q = nxt[x];
                nxt[p] = q;
                prv[q] = p;
            } else {
                double sz = size[x];
                if (sz > cap[g]) continue;
                while (used[g] + sz > cap[g]) {
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
            tally(h, x, t, st, counted, hit_out, hits, misses, weighted, wsize, streamed);
        }
    }
    free(seen);
    return 0;
}

int mr_stack_kernel(const int32_t *items, const int64_t *label, int64_t n_items, int64_t window,
                    const int64_t *off, int64_t n_lookups, const int64_t *cstep, int per_request,
                    int64_t warm, int64_t *out, int64_t *hist) {
    int64_t *last = malloc((n_items > 0 ? n_items : 1) * sizeof *last);
    int64_t *owner = malloc((window > 0 ? window : 1) * sizeof *owner);
    int32_t *tree = calloc(window + 1, sizeof *tree);
    if (!last || !owner || !tree) {
        free(last);
        free(owner);
        free(tree);
        return -1;
    }
    for (int64_t i = 0; i < n_items; i++) last[i] = -1;
    for (int64_t i = 0; i < window; i++) owner[i] = -1;
    int64_t pos = 0, live = 0;
    for (int64_t ci = 0; ci < n_lookups; ci++) {
        int64_t a = off[ci], b = off[ci + 1];
        int counted = hist && (warm <= 0 || cstep[ci] >= warm);
        for (int64_t t = a; t < b; t++) {
            int64_t x = label[items[t]];
            if (pos == window) {  /* compact: live marks renumbered 0..k-1, tree rebuilt */
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
                memset(tree, 0, (window + 1) * sizeof *tree);
                for (int64_t i = 1; i <= window; i++) {
                    if (i <= k) tree[i] += 1;
                    int64_t j = i + (i & -i);
                    if (j <= window) tree[j] += tree[i];
                }
                pos = k;
            }
            if (per_request || t == a) {
                int64_t end = per_request ? t + 1 : b;
                for (int64_t u = t; u < end; u++) {
                    int64_t pu = last[label[items[u]]], dist = 0;
                    if (pu >= 0) {
                        int64_t s = 0;
                        for (int64_t i = pu + 1; i > 0; i -= i & -i) s += tree[i];
                        dist = live - s + 1;
                    }
                    if (out) out[u] = dist;
                    if (counted) hist[dist]++;
                }
            }
            int64_t p = last[x];
            if (p < 0) {
                live++;
            } else {
                for (int64_t i = p + 1; i <= window; i += i & -i) tree[i] -= 1;
                owner[p] = -1;
            }
            for (int64_t i = pos + 1; i <= window; i += i & -i) tree[i] += 1;
            owner[pos] = x;
            last[x] = pos;
            pos++;
        }
    }
    free(last);
    free(owner);
    free(tree);
    return 0;
}
