/* The routing kernels: the inclusion programme and the trace sampler's top-K step of
 * moeroof/models/routing.py (the algorithms are documented there and in moeroof/kernels/routing.py),
 * giving the numbers of the numpy code they replaced bit for bit (see routing.h for how). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "routing.h"

/* ============================================================================ pairwise sums */

/* numpy's pairwise summation of a contiguous run of n <= 128 doubles (its PW_BLOCKSIZE): below 8
 * terms a plain loop from 0.0; up to 128 eight accumulators, the first eight terms their start,
 * combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the rest added in order. Above 128 numpy
 * splits the run in halves; the callers keep such sums in numpy. */
double mr_pairwise_sum(const double *a, int64_t n) {
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    double r0 = a[0], r1 = a[1], r2 = a[2], r3 = a[3], r4 = a[4], r5 = a[5], r6 = a[6], r7 = a[7];
    int64_t i = 8, stop = n - n % 8;
    for (; i < stop; i += 8) {
        r0 += a[i];
        r1 += a[i + 1];
        r2 += a[i + 2];
        r3 += a[i + 3];
        r4 += a[i + 4];
        r5 += a[i + 5];
        r6 += a[i + 6];
        r7 += a[i + 7];
    }
    double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    for (; i < n; i++) res += a[i];
    return res;
}

/* ============================================================================ inclusion */

/* Nodes processed side by side: every array below is a list of rows of NB nodes, and each
 * innermost loop runs over the NB nodes of one row. Every node's arithmetic is the same, in the
 * same order, whatever its neighbours, so the compiler may vectorise across nodes (SIMD lanes
 * are separate nodes) and no result changes. */
#define NB 32
typedef double nodes_t[NB];

/* b = a * q + a_prev * pj, node by node (a_prev NULL: a * q); one Poisson-binomial step */
static inline void pb_step(double *restrict b, const double *restrict a, const double *restrict a_prev,
                           const double *restrict q, const double *restrict pj) {
    if (a_prev == NULL) {
        for (int tt = 0; tt < NB; tt++) b[tt] = a[tt] * q[tt];
    } else {
        for (int tt = 0; tt < NB; tt++) b[tt] = a[tt] * q[tt] + a_prev[tt] * pj[tt];
    }
}

/* dst += src, node by node */
static inline void add_rows(double *restrict dst, const double *restrict src) {
    for (int tt = 0; tt < NB; tt++) dst[tt] = dst[tt] + src[tt];
}

/* dst = a + b, node by node */
static inline void sum_rows(double *restrict dst, const double *restrict a, const double *restrict b) {
    for (int tt = 0; tt < NB; tt++) dst[tt] = a[tt] + b[tt];
}

/* dst = a * b, node by node */
static inline void mul_rows(double *restrict dst, const double *restrict a, const double *restrict b) {
    for (int tt = 0; tt < NB; tt++) dst[tt] = a[tt] * b[tt];
}

/* res = the k products prod[0..k-1] summed, node by node, as mr_pairwise_sum sums them (np.sum
 * over the last axis of numpy's programme); acc holds the eight accumulators */
static void pairwise_rows(const nodes_t *restrict prod, int64_t k, nodes_t *restrict acc,
                          double *restrict res) {
    if (k < 8) {
        for (int tt = 0; tt < NB; tt++) res[tt] = 0.0;
        for (int64_t c = 0; c < k; c++) add_rows(res, prod[c]);
        return;
    }
    memcpy(acc, prod, 8 * sizeof(nodes_t));
    int64_t i = 8, stop = k - k % 8;
    for (; i < stop; i += 8)
        for (int c = 0; c < 8; c++) add_rows(acc[c], prod[i + c]);
    for (int tt = 0; tt < NB; tt++)
        res[tt] = ((acc[0][tt] + acc[1][tt]) + (acc[2][tt] + acc[3][tt])) +
                  ((acc[4][tt] + acc[5][tt]) + (acc[6][tt] + acc[7][tt]));
    for (; i < k; i++) add_rows(res, prod[i]);
}

/* pj = p[j, t0 .. t0 + NB - 1] (0 past n) and q = 1 - pj */
static inline void load_nodes(const double *p_j, int64_t n, int64_t t0, double *restrict pj,
                              double *restrict q) {
    int64_t w = n - t0 < NB ? n - t0 : NB;
    for (int64_t tt = 0; tt < w; tt++) pj[tt] = p_j[t0 + tt];
    for (int64_t tt = w; tt < NB; tt++) pj[tt] = 0.0;
    for (int tt = 0; tt < NB; tt++) q[tt] = 1.0 - pj[tt];
}

/* The scratch of mr_inclusion_below_k: pref (e + 1, k), then suf, nxt, cum, prod (k each), acc
 * (8), rows of NB nodes. */
typedef struct {
    nodes_t *pref, *suf, *nxt, *cum, *prod, *acc;
} incl_scratch;

/* One row r's nodes t0 .. t0 + NB - 1 (the last block padded with p = 0, whose results are not
 * written): out[j, t] for every expert j. p_r and out_r are the row's (e, n) planes. */
static void below_k_block(const double *p_r, int64_t e, int64_t n, int64_t t0, int64_t k,
                          incl_scratch *s, double *out_r) {
    double pj[NB], q[NB], res[NB];
    /* pref[j] = the distribution of the arrivals among the experts < j, counts 0 .. k-1:
     * numpy's prefix[j + 1] = prefix[j] * (1 - p_j), plus prefix[j][c - 1] * p_j at count c */
    memset(s->pref[0], 0, (size_t)k * sizeof(nodes_t));
    for (int tt = 0; tt < NB; tt++) s->pref[0][tt] = 1.0;
    for (int64_t j = 0; j < e; j++) {
        nodes_t *a = s->pref + j * k, *b = s->pref + (j + 1) * k;
        load_nodes(p_r + j * n, n, t0, pj, q);
        pb_step(b[0], a[0], NULL, q, pj);
        for (int64_t c = 1; c < k; c++) pb_step(b[c], a[c], a[c - 1], q, pj);
    }
    /* suf = the distribution among the experts > j, built from the last expert down; then
     * P(N_{-j} < K) = sum over a + b < K of pref_j[a] * suf[b]: suf's np.cumsum (cum), the
     * products pref_j[c] * cum[k - 1 - c] (prod), summed as np.sum sums them */
    memset(s->suf, 0, (size_t)k * sizeof(nodes_t));
    for (int tt = 0; tt < NB; tt++) s->suf[0][tt] = 1.0;
    for (int64_t j = e - 1; j >= 0; j--) {
        nodes_t *a = s->pref + j * k;
        memcpy(s->cum[0], s->suf[0], sizeof(nodes_t));
        for (int64_t c = 1; c < k; c++) sum_rows(s->cum[c], s->cum[c - 1], s->suf[c]);
        for (int64_t c = 0; c < k; c++) mul_rows(s->prod[c], a[c], s->cum[k - 1 - c]);
        pairwise_rows((const nodes_t *)s->prod, k, s->acc, res);
        int64_t w = n - t0 < NB ? n - t0 : NB;
        for (int64_t tt = 0; tt < w; tt++) out_r[j * n + t0 + tt] = res[tt];
        /* fold expert j into the suffix (into nxt, then swapped in: no copy) */
        load_nodes(p_r + j * n, n, t0, pj, q);
        pb_step(s->nxt[0], s->suf[0], NULL, q, pj);
        for (int64_t c = 1; c < k; c++) pb_step(s->nxt[c], s->suf[c], s->suf[c - 1], q, pj);
        nodes_t *tmp = s->suf;
        s->suf = s->nxt;
        s->nxt = tmp;
    }
}

/* P(N_{-j}(t) < K) for every row r, expert j and node t of p (m, e, n), where p[r, j, t] =
 * P(expert j arrived by t): the prefix/suffix Poisson-binomial programmes of
 * moeroof.models.routing._inclusion_rows (_below_k_numpy) with the same operations in the same
 * order for each (row, node), in blocks of NB nodes side by side. k <= 128: numpy sums the k
 * products in one pairwise block up to 128 terms, which pairwise_rows copies. */
int mr_inclusion_below_k(const double *p, int64_t m, int64_t e, int64_t n, int64_t k, double *out) {
    if (m <= 0 || e <= 0 || n <= 0) return 0;
    if (k < 1 || k > MR_PW_BLOCK) return -2;
    size_t rows = (size_t)(e + 1) * (size_t)k + 4 * (size_t)k + 8;
    nodes_t *buf = malloc(rows * sizeof(nodes_t));
    if (buf == NULL) return -1;
    incl_scratch s;
    s.pref = buf;
    s.suf = s.pref + (e + 1) * k;
    s.nxt = s.suf + k;
    s.cum = s.nxt + k;
    s.prod = s.cum + k;
    s.acc = s.prod + k;
    for (int64_t r = 0; r < m; r++)
        for (int64_t t0 = 0; t0 < n; t0 += NB)
            below_k_block(p + r * e * n, e, n, t0, k, &s, out + r * e * n);
    free(buf);
    return 0;
}

/* ============================================================================ Gumbel draws */

/* numpy's Generator.gumbel() is loc - scale * log(-log(1 - U)) with libm's log (a draw U of
 * exactly 0 is redrawn, which the caller does), computed here the same way: loc 0, scale 1 (the
 * 1.0 * is exact; 0.0 - x keeps numpy's sign of a zero) */
static inline double gumbel(double u) { return 0.0 - 1.0 * log(-log(1.0 - u)); }

void mr_gumbel_from_uniforms(const double *u, int64_t n, double *out) {
    for (int64_t i = 0; i < n; i++) out[i] = gumbel(u[i]);
}

/* ============================================================================ the top-K step */

void mr_log_weight_rows(const double *logq, int64_t rows, int64_t e, double *top, double *rel) {
    for (int64_t r = 0; r < rows; r++) {
        const double *lq = logq + r * e;
        double *rl = rel + r * e;
        double m = -INFINITY;
        for (int64_t i = 0; i < e; i++)
            if (lq[i] > m) m = lq[i];
        top[r] = m;
        if (m > -INFINITY)
            for (int64_t i = 0; i < e; i++) rl[i] = exp(lq[i] - m);
        else
            for (int64_t i = 0; i < e; i++) rl[i] = 0.0;
    }
}

/* relative weights below this are never screened out (an underflowed or subnormal weight) */
#define REL_FLOOR 1e-300
/* the prefilter of screen() keeps an expert unless its upper bound falls below this share of a
 * lower bound on the final cut's bound: far below the cut's slack (at most ~1e-5 for
 * |top| <= TOP_SCREENED) and any rounding, so every expert the cut keeps is a candidate. This
 * room is what lets floor_bound round as it likes (the numba original ran it with fast-math): its
 * value only decides which experts reach the exact cut, never the cut itself. */
#define RUN_SHARE 0.999
/* rows whose largest log weight is beyond this skip the prefilter (the cut's slack grows with
 * |top|) */
#define TOP_SCREENED 1e9
/* the least uniform whose Gumbel draw screen() bounds by G_MAX: 2^-53, the least nonzero double
 * Generator.random draws (1 - u is then below 1) */
#define U_LEAST 0x1p-53
/* above the largest Gumbel draw -log(-log(1 - u)) of any u >= U_LEAST (36.74), with room for
 * rounding */
#define G_MAX 40.0
/* chunks floor_bound splits a row into, per expert its bound must reach */
#define CHUNKS_PER_SLOT 3

/* Loops over a row's experts run in groups of LANES with a constant trip count, then the rest one
 * by one: at -O2 GCC vectorises only loops that need no scalar remainder (its "very cheap" cost
 * model), and each expert's arithmetic is its own, so the grouping changes no result. */
#define LANES 8

/* The scratch of the top-K step, one set for every row and step. */
typedef struct {
    int64_t *keep_ids; /* the kept experts of a row, in their previous slots' order */
    double *is_kept;   /* (e,) 1.0 for a kept expert, reset after each row (a double: compared
                        * beside the doubles, so the loops over a row vectorise on SSE2) */
    double *vals;      /* (nbuf,) the best scores, descending */
    int64_t *ids;      /* (nbuf,) their experts */
    double *lb_num;    /* (nbuf,) the largest lower bounds rel (1 - u) / u, as fractions */
    double *lb_den;
    int64_t *cand;     /* (e,) the candidates past the prefilter, ascending id */
    double *maxima;    /* (2e,) floor_bound's chunk maxima, then its bounds */
    double *mask;      /* (e,) the prefilter's keep flags, 1.0 or 0.0 (doubles: see is_kept) */
} topk_scratch;

/* floor_bound's bound of expert i: rel (1 - u) / u, or 0 for a kept or tiny expert, computed
 * branch-free as the bound times 1.0 or 0.0 (written `ok ? x : 0.0`, GCC moves the division, which
 * may trap, into a branch that neither pipelines nor vectorises). The product is the bound, or +0
 * where the bound is finite (rel <= 1, 0 < u < 1), NaN only where rel is NaN: floor_bound's
 * maxima skip a NaN as they skip a 0. */
static inline double lower_bound_at(const double *restrict rel, const double *restrict u,
                                    const double *restrict is_kept, int64_t i) {
    double ok = (is_kept[i] == 0.0) & (rel[i] >= REL_FLOOR) ? 1.0 : 0.0;
    return rel[i] * (1.0 - u[i]) / u[i] * ok;
}

/* A lower bound on the nbuf-th largest lower bound rel (1 - u) / u of screen() (0 when there is
 * none): the ids in CHUNKS_PER_SLOT * nbuf consecutive chunks, the nbuf-th largest of the chunks'
 * largest. Each chunk's largest is a different expert's, so nbuf experts reach it. The bounds
 * are one branch-free loop over the row (lower_bound_at), the chunks' ends stepped without an
 * integer division. */
static double floor_bound(const double *restrict rel, const double *restrict u,
                          const double *restrict is_kept, int64_t e, int64_t nbuf,
                          double *restrict maxima) {
    int64_t chunks = CHUNKS_PER_SLOT * nbuf < e ? CHUNKS_PER_SLOT * nbuf : e;
    if (nbuf > chunks) return 0.0;
    double *restrict xbuf = maxima + chunks; /* maxima holds 2e: room for the e bounds */
    int64_t i = 0;
    for (; i + LANES <= e; i += LANES)
        for (int l = 0; l < LANES; l++) xbuf[i + l] = lower_bound_at(rel, u, is_kept, i + l);
    for (; i < e; i++) xbuf[i] = lower_bound_at(rel, u, is_kept, i);
    /* chunk j is ids j e / chunks .. (j + 1) e / chunks - 1 */
    int64_t q = e / chunks, rem = e % chunks, lo = 0, acc = 0;
    for (int64_t j = 0; j < chunks; j++) {
        acc += rem;
        int64_t wrap = acc >= chunks;
        int64_t hi = lo + q + wrap;
        acc -= wrap ? chunks : 0;
        double m = 0.0;
        for (int64_t x = lo; x < hi; x++) m = xbuf[x] > m ? xbuf[x] : m;
        maxima[j] = m;
        lo = hi;
    }
    /* the nbuf-th largest of the chunk maxima: a partial insertion sort, descending */
    for (int64_t j = 1; j < chunks; j++) {
        double x = maxima[j];
        int64_t pos = j < nbuf ? j : nbuf;
        if (pos == nbuf && !(x > maxima[nbuf - 1])) continue;
        while (pos > 0 && maxima[pos - 1] < x) {
            if (pos < nbuf) maxima[pos] = maxima[pos - 1];
            pos--;
        }
        maxima[pos] = x;
    }
    return maxima[nbuf - 1];
}

/* screen()'s keep flag of expert i: not kept, and of tiny weight (and not below floor_log, unless
 * its draw is below U_LEAST) or with an upper bound rel / u of at least thr */
static inline double keep_at(const double *restrict logq, const double *restrict rel,
                             const double *restrict u, const double *restrict is_kept, double thr,
                             double floor_log, int64_t i) {
    double ri = rel[i], ui = u[i];
    int64_t tiny = (ri < REL_FLOOR) & ((logq[i] >= floor_log) | (ui < U_LEAST));
    return (is_kept[i] == 0.0) & (tiny | (ri >= thr * ui)) ? 1.0 : 0.0;
}

/* The first pass of the top-K step on one row: the cut below which an expert's score cannot
 * reach the K+1 best, and the candidates, in ascending id, that may pass it (their count is
 * returned, the cut in *cut).
 *
 * With G(u) = -log(-log(1 - u)) and u <= -log(1 - u) <= u / (1 - u),
 * rel_i (1 - u_i) / u_i <= exp(s_i - top) <= rel_i / u_i. The nbuf-th largest lower bound bounds
 * the (K+1)-th best score from below, so expert i can be in the top K only if rel_i / u_i
 * reaches it (less a slack far above rounding): a product and a comparison per expert, no
 * logarithm. Experts of tiny or zero weight are never screened. The lower bounds are kept as
 * fractions rel (1 - u) / u, compared by cross-multiplying.
 *
 * A prefilter first drops the experts whose upper bound is below RUN_SHARE of floor_bound():
 * their lower bounds are below the nbuf-th largest, which they cannot change, and the cut drops
 * them too. Of the experts of tiny weight, it drops those whose score cannot reach the
 * prefilter's bound however large their Gumbel draw (logq + G(u) < logq + G_MAX < top +
 * log(bound)): nbuf experts score above it. The bounds are then taken among the rest, in the
 * same order: the same cut, the same candidates past it, the same K+1 best. */
static int64_t screen(const double *logq, const double *rel, const double *u, int64_t e,
                      int64_t nbuf, double top, topk_scratch *s, double *cut) {
    const double *is_kept = s->is_kept;
    double low0 = fabs(top) <= TOP_SCREENED ? floor_bound(rel, u, is_kept, e, nbuf, s->maxima) : 0.0;
    double thr = RUN_SHARE * low0;
    double floor_log = low0 > 0.0 ? top + log(low0) - G_MAX : -INFINITY;
    /* the keep flags in a branch-free loop, then the candidates compacted from them */
    double *mask = s->mask;
    int64_t *cand = s->cand;
    int64_t x = 0;
    for (; x + LANES <= e; x += LANES)
        for (int l = 0; l < LANES; l++)
            mask[x + l] = keep_at(logq, rel, u, is_kept, thr, floor_log, x + l);
    for (; x < e; x++) mask[x] = keep_at(logq, rel, u, is_kept, thr, floor_log, x);
    int64_t n_cand = 0;
    for (x = 0; x < e; x++) {
        cand[n_cand] = x;
        n_cand += mask[x] != 0.0;
    }
    /* the nbuf largest lower bounds, by insertion (descending) */
    double *lb_num = s->lb_num, *lb_den = s->lb_den;
    int64_t n_lb = 0;
    for (int64_t j = 0; j < n_cand; j++) {
        int64_t i = cand[j], pos;
        double ri = rel[i];
        if (ri < REL_FLOOR) continue;
        double ui = u[i], num = ri * (1.0 - ui);
        if (n_lb < nbuf)
            pos = n_lb++;
        else if (num * lb_den[nbuf - 1] > lb_num[nbuf - 1] * ui)
            pos = nbuf - 1;
        else
            continue;
        while (pos > 0 && lb_num[pos - 1] * ui < num * lb_den[pos - 1]) {
            lb_num[pos] = lb_num[pos - 1];
            lb_den[pos] = lb_den[pos - 1];
            pos--;
        }
        lb_num[pos] = num;
        lb_den[pos] = ui;
    }
    *cut = 0.0;
    if (n_lb == nbuf && lb_num[nbuf - 1] > 0.0) {
        double low = lb_num[nbuf - 1] / lb_den[nbuf - 1];
        double slack = 1e-9 + 1e-14 * (fabs(top) + fabs(log(low)) + 50.0);
        *cut = low * exp(-2.0 * slack);
    }
    return n_cand;
}

/* The second pass on one row: the nbuf best scores logq + G(u) among the candidates past the cut,
 * by insertion in ascending id (an equal score goes after), into s->vals and s->ids, each score
 * computed as numpy computes it (Generator.gumbel's libm log). */
static void best_of(const double *logq, const double *rel, const double *u, int64_t n_cand,
                    double cut, int64_t nbuf, topk_scratch *s) {
    double *vals = s->vals;
    int64_t *ids = s->ids, filled = 0;
    for (int64_t j = 0; j < n_cand; j++) {
        int64_t i = s->cand[j], pos;
        if (rel[i] >= REL_FLOOR && rel[i] < cut * u[i]) continue;
        /* -inf + any Gumbel draw is -inf */
        double sc = logq[i] == -INFINITY ? -INFINITY : logq[i] + gumbel(u[i]);
        if (filled == nbuf) {
            /* at or below the (K+1)-th best: out of the top K whatever ties it has there */
            if (!(sc > vals[nbuf - 1])) continue;
            pos = nbuf - 1;
        } else {
            pos = filled++;
        }
        while (pos > 0 && vals[pos - 1] < sc) {
            vals[pos] = vals[pos - 1];
            ids[pos] = ids[pos - 1];
            pos--;
        }
        vals[pos] = sc;
        ids[pos] = i;
    }
}

/* Steps first .. first + n - 1 of moeroof.models.routing.sample_trace on rows (streams x layers)
 * of e experts at one log weight logq (no NaN), rel and top from mr_log_weight_rows.
 *
 * A row keeps slot q of its previous picks when keep_u[t, r, q] < rho[r] (none at step 0, none
 * without keep columns). Its picks are the kept experts first, in the order of their previous
 * slots, then the K - kept largest scores logq + G(u) among the others, descending, equal scores
 * in ascending expert id: one order on every machine (numpy's sorts break ties by their SIMD
 * path). Only the scores that can reach the top K+1 are computed (screen(), then best_of()). */
int mr_top_k_steps(const double *logq, const double *top, const double *rel, const double *u, int64_t n,
                   int64_t rows, int64_t e, const double *keep_u, int64_t n_keep_cols, const double *rho,
                   int32_t *out, int64_t first, int64_t k) {
    if (n <= 0 || rows <= 0 || e <= 0) return 0;
    int64_t nk = (n_keep_cols > k ? n_keep_cols : k) + 1;
    topk_scratch s;
    s.keep_ids = calloc((size_t)nk, sizeof *s.keep_ids);
    s.is_kept = calloc((size_t)e, sizeof *s.is_kept);
    s.vals = calloc((size_t)k + 1, sizeof *s.vals);
    s.ids = calloc((size_t)k + 1, sizeof *s.ids);
    s.lb_num = calloc((size_t)k + 1, sizeof *s.lb_num);
    s.lb_den = calloc((size_t)k + 1, sizeof *s.lb_den);
    s.cand = malloc((size_t)e * sizeof *s.cand);
    s.maxima = malloc(2 * (size_t)e * sizeof *s.maxima);
    s.mask = malloc((size_t)e * sizeof *s.mask);
    int rc = -1;
    if (!s.keep_ids || !s.is_kept || !s.vals || !s.ids || !s.lb_num || !s.lb_den || !s.cand ||
        !s.maxima || !s.mask)
        goto done;
    for (int64_t t = 0; t < n; t++) {
        int64_t step = first + t;
        for (int64_t r = 0; r < rows; r++) {
            int64_t n_keep = 0;
            if (step > 0)
                for (int64_t q = 0; q < n_keep_cols; q++)
                    if (keep_u[(t * rows + r) * n_keep_cols + q] < rho[r])
                        s.keep_ids[n_keep++] = out[((step - 1) * rows + r) * k + q];
            for (int64_t q = 0; q < n_keep; q++) s.is_kept[s.keep_ids[q]] = 1.0;
            int64_t nbuf = k + 1 - n_keep < e - n_keep ? k + 1 - n_keep : e - n_keep;
            if (nbuf > 0) {
                const double *lq = logq + r * e, *rl = rel + r * e, *ur = u + (t * rows + r) * e;
                double cut;
                int64_t n_cand = screen(lq, rl, ur, e, nbuf, top[r], &s, &cut);
                best_of(lq, rl, ur, n_cand, cut, nbuf, &s);
            }
            int32_t *o = out + (step * rows + r) * k;
            for (int64_t q = 0; q < n_keep; q++) {
                s.is_kept[s.keep_ids[q]] = 0.0;
                o[q] = (int32_t)s.keep_ids[q];
            }
            for (int64_t x = 0; x < k - n_keep; x++) o[n_keep + x] = (int32_t)s.ids[x];
        }
    }
    rc = 0;
done:
    free(s.keep_ids);
    free(s.is_kept);
    free(s.vals);
    free(s.ids);
    free(s.lb_num);
    free(s.lb_den);
    free(s.cand);
    free(s.maxima);
    free(s.mask);
    return rc;
}
