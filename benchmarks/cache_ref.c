/* Reference C implementations for benchmarks/run.py (items 4 and 5): the same algorithms as
 * moeroof's cache kernels (as first written), for a speed ratio on the same request array.
 *
 *   cache_ref lru ITEMS_FILE N_ITEMS CAPACITY REPEATS  -> "best_seconds hits"
 *   cache_ref mrc ITEMS_FILE N_ITEMS WINDOW REPEATS    -> "best_seconds" then the stack-distance
 *                                                          histogram, one count per line (d = 0..N_ITEMS)
 * ITEMS_FILE holds raw little-endian int64 item ids in [0, N_ITEMS). Compile with cc -O2.
 *  - lru: one doubly linked list, unit sizes, sentinel node N_ITEMS (as _lru_kernel).
 *  - mrc: Mattson stack distances by a Fenwick tree over last-access positions, compacted when
 *    the clock reaches WINDOW (as _stack_distance_kernel).
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int64_t lru(const int64_t *items, int64_t n, int64_t n_items, int64_t cap) {
    int64_t *prv = malloc((n_items + 1) * sizeof *prv), *nxt = malloc((n_items + 1) * sizeof *nxt);
    char *cached = calloc(n_items, 1);
    int64_t s = n_items, used = 0, hits = 0;
    prv[s] = nxt[s] = s;
    for (int64_t t = 0; t < n; t++) {
        int64_t x = items[t];
        if (cached[x]) {
            hits++;
            int64_t p = prv[x], q = nxt[x];
            nxt[p] = q; prv[q] = p;
        } else {
            if (cap < 1) continue;
            while (used + 1 > cap) {
                int64_t v = prv[s], p = prv[v];
                nxt[p] = s; prv[s] = p; cached[v] = 0; used--;
            }
            cached[x] = 1; used++;
        }
        int64_t q = nxt[s];
        nxt[s] = x; prv[x] = s; nxt[x] = q; prv[q] = x;
    }
    free(prv); free(nxt); free(cached);
    return hits;
}

static void mrc(const int64_t *items, int64_t n, int64_t n_items, int64_t window, int64_t *hist) {
    int64_t *last = malloc(n_items * sizeof *last), *owner = malloc(window * sizeof *owner);
    int32_t *tree = calloc(window + 1, sizeof *tree);
    for (int64_t i = 0; i < n_items; i++) last[i] = -1;
    for (int64_t i = 0; i < window; i++) owner[i] = -1;
    memset(hist, 0, (n_items + 1) * sizeof *hist);
    int64_t pos = 0, live = 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t x = items[t];
        if (pos == window) {
            int64_t k = 0;
            for (int64_t q = 0; q < window; q++) {
                int64_t o = owner[q];
                if (o >= 0) { owner[q] = -1; owner[k] = o; last[o] = k; k++; }
            }
            memset(tree, 0, (window + 1) * sizeof *tree);
            for (int64_t i = 1; i <= window; i++) {
                if (i <= k) tree[i] += 1;
                int64_t j = i + (i & -i);
                if (j <= window) tree[j] += tree[i];
            }
            pos = k;
        }
        int64_t p = last[x];
        if (p < 0) {
            hist[0]++;
            live++;
        } else {
            int64_t s = 0;
            for (int64_t i = p + 1; i > 0; i -= i & -i) s += tree[i];
            hist[live - s + 1]++;
            for (int64_t i = p + 1; i <= window; i += i & -i) tree[i]--;
            owner[p] = -1;
        }
        for (int64_t i = pos + 1; i <= window; i += i & -i) tree[i]++;
        owner[pos] = x; last[x] = pos; pos++;
    }
    free(last); free(owner); free(tree);
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s lru|mrc FILE N_ITEMS CAP|WINDOW REPEATS\n", argv[0]); return 2; }
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 2; }
    fseek(f, 0, SEEK_END);
    int64_t n = ftell(f) / 8;
    fseek(f, 0, SEEK_SET);
    int64_t *items = malloc(n * 8);
    if (fread(items, 8, n, f) != (size_t)n) { fprintf(stderr, "short read\n"); return 2; }
    fclose(f);
    int64_t n_items = atoll(argv[3]), arg = atoll(argv[4]), repeats = atoll(argv[5]);
    double best = 1e300;
    if (strcmp(argv[1], "lru") == 0) {
        int64_t hits = 0;
        for (int64_t r = 0; r < repeats; r++) {
            double t0 = now();
            hits = lru(items, n, n_items, arg);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("%.9f %lld\n", best, (long long)hits);
    } else {
        int64_t *hist = malloc((n_items + 1) * sizeof *hist);
        for (int64_t r = 0; r < repeats; r++) {
            double t0 = now();
            mrc(items, n, n_items, arg, hist);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("%.9f\n", best);
        for (int64_t d = 0; d <= n_items; d++) printf("%lld\n", (long long)hist[d]);
    }
    return 0;
}
