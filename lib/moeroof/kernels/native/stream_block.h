/* The block kernels of stream.c for one id type: stream.c defines T (the type) and SUF (the
 * name suffix) and includes this file once per type. Not a header of its own.
 *
 * Both walk a step's ids in memory order (stream, layer, k) over a group of layers at a time
 * and mark each (layer, expert) seen with a stamp of the (step, group), so the block is read
 * sequentially and repeats cost no branch. The result: per (step, layer), the distinct experts
 * of the streams `sel`, in ascending id. `mark` (a scratch of the wrapper's interface) is not
 * used; the groups hold MR_MARKS marks at most (one layer at least). */

int SUF(mr_scan_block)(const T *block, int64_t ns, int64_t nt, int64_t nl, int64_t nk,
                       int64_t experts, const int64_t *sel, int64_t n_sel, const uint8_t *keep,
                       int use_keep, int strict, int64_t *mark, int64_t *tmark, int64_t *ctr,
                       int32_t *cells, int64_t c0, int64_t *err) {
    (void)mark;
    int64_t lg = experts > 0 && experts < MR_MARKS ? MR_MARKS / experts : 1;
    if (lg > nl) lg = nl;
    int have_partial = 0, have_dup = 0, rc = MR_ID_OK;
    int64_t *seen = calloc(lg * experts > 0 ? lg * experts : 1, sizeof *seen);
    int32_t *cnt = calloc(lg > 0 ? lg : 1, sizeof *cnt);
    if (!seen || !cnt) {
        rc = -1;
        goto done;
    }
    int64_t stamp = 0;
#define AT(s, t, l, k) block[(((s) * nt + (t)) * nl + (l)) * nk + (k)]
    for (int64_t s = 0; s < ns; s++) {
        if (strict) {
            for (int64_t t = 0; t < nt; t++) {
                for (int64_t l = 0; l < nl; l++) {
                    int64_t npad = 0;
                    for (int64_t k = 0; k < nk; k++) {
                        int64_t v = AT(s, t, l, k);
                        if (v < -1 || v >= experts) {
                            err[0] = s, err[1] = t, err[2] = l, err[3] = k, err[4] = v;
                            rc = MR_ID_RANGE;
                            goto done;
                        }
                        npad += v == -1;
                    }
                    if (npad > 0) {
                        if (npad < nk && !have_partial) {
                            have_partial = 1;
                            int64_t k = 0;
                            while (AT(s, t, l, k) != -1) k++;
                            err[5] = s, err[6] = t, err[7] = l, err[8] = k, err[9] = -1;
                        }
                    } else if (nk > 1 && !have_dup) {
                        int64_t tok = ++ctr[0];
                        for (int64_t k = 0; k < nk; k++) {
                            int64_t v = AT(s, t, l, k);
                            if (tmark[v] == tok) {
                                have_dup = 1;
                                err[10] = s, err[11] = t, err[12] = l, err[13] = k, err[14] = v;
                                break;
                            }
                            tmark[v] = tok;
                        }
                    }
                }
            }
        } else {  /* only the streams sel, for range: the first bad id of the step, C order */
            for (int64_t i = 0; i < n_sel; i++) {
                const T *row = block + (s * nt + sel[i]) * nl * nk;
                for (int64_t j = 0; j < nl * nk; j++) {
                    int64_t v = row[j];
                    if (v < -1 || v >= experts) {
                        err[0] = s, err[1] = sel[i], err[2] = j / nk, err[3] = j % nk, err[4] = v;
                        rc = MR_ID_RANGE;
                        goto done;
                    }
                }
            }
        }
        for (int64_t l0 = 0; l0 < nl; l0 += lg) {
            int64_t l1 = l0 + lg < nl ? l0 + lg : nl;
            stamp++;
            for (int64_t l = l0; l < l1; l++) cnt[l - l0] = 0;
            for (int64_t i = 0; i < n_sel; i++) {
                const T *row = block + (s * nt + sel[i]) * nl * nk;
                for (int64_t l = l0; l < l1; l++) {
                    int64_t *m = seen + (l - l0) * experts;
                    for (int64_t k = 0; k < nk; k++) {
                        int64_t v = row[l * nk + k];
                        if (v < 0 || (use_keep && !keep[l * experts + v])) continue;
                        cnt[l - l0] += m[v] != stamp; /* branch-free: about half are repeats */
                        m[v] = stamp;
                    }
                }
            }
            for (int64_t l = l0; l < l1; l++) cells[c0 + s * nl + l] = cnt[l - l0];
        }
    }
#undef AT
    if (have_partial) {
        for (int j = 0; j < 5; j++) err[j] = err[5 + j];
        rc = MR_ID_PARTIAL;
    } else if (have_dup) {
        for (int j = 0; j < 5; j++) err[j] = err[10 + j];
        rc = MR_ID_DUPLICATE;
    }
done:
    free(seen);
    free(cnt);
    return rc;
}

int64_t SUF(mr_emit_block)(const T *block, int64_t ns, int64_t nt, int64_t nl, int64_t nk,
                           int64_t experts, const int64_t *sel, int64_t n_sel,
                           const uint8_t *keep, int use_keep, int64_t *mark, int64_t c0,
                           int32_t *out, int64_t pos) {
    (void)mark;
    (void)c0;
    int64_t lg = experts > 0 && experts < MR_MARKS ? MR_MARKS / experts : 1;
    if (lg > nl) lg = nl;
    int64_t width = n_sel * nk < experts ? n_sel * nk : experts; /* distinct ids of a cell */
    int64_t stride = width + 1; /* + 1: a repeat is written one past the list, and not kept */
    int64_t *seen = calloc(lg * experts > 0 ? lg * experts : 1, sizeof *seen);
    int32_t *lst = malloc((lg > 0 ? lg : 1) * stride * sizeof *lst);
    int32_t *tmp = malloc((experts + 1) * sizeof *tmp);
    int64_t *cnt = calloc(lg > 0 ? lg : 1, sizeof *cnt);
    int64_t stamp = 0;
    if (!seen || !lst || !tmp || !cnt) {
        pos = -1;
        goto done;
    }
    for (int64_t s = 0; s < ns; s++) {
        for (int64_t l0 = 0; l0 < nl; l0 += lg) {
            int64_t l1 = l0 + lg < nl ? l0 + lg : nl;
            stamp++;
            for (int64_t l = l0; l < l1; l++) cnt[l - l0] = 0;
            for (int64_t i = 0; i < n_sel; i++) {
                const T *row = block + (s * nt + sel[i]) * nl * nk;
                for (int64_t l = l0; l < l1; l++) {
                    int64_t *m = seen + (l - l0) * experts, *c = cnt + (l - l0);
                    int32_t *dst = lst + (l - l0) * stride;
                    for (int64_t k = 0; k < nk; k++) {
                        int64_t v = row[l * nk + k];
                        if (v < 0 || (use_keep && !keep[l * experts + v])) continue;
                        dst[*c] = (int32_t)v; /* kept only when new: branch-free */
                        *c += m[v] != stamp;
                        m[v] = stamp;
                    }
                }
            }
            for (int64_t l = l0; l < l1; l++) {
                int64_t c = cnt[l - l0];
                int32_t *buf = out + pos, base = (int32_t)(l * experts);
                if (c * c <= 4 * experts) { /* few: an insertion sort of the list */
                    const int32_t *src = lst + (l - l0) * stride;
                    for (int64_t j = 0; j < c; j++) {
                        int32_t x = src[j] + base;
                        int64_t q = j - 1;
                        while (q >= 0 && buf[q] > x) {
                            buf[q + 1] = buf[q];
                            q--;
                        }
                        buf[q + 1] = x;
                    }
                } else { /* many: a branch-free sweep of the layer's marks */
                    const int64_t *m = seen + (l - l0) * experts;
                    int64_t j = 0;
                    for (int64_t e = 0; e < experts; e++) {
                        tmp[j] = (int32_t)(base + e);
                        j += m[e] == stamp;
                    }
                    memcpy(buf, tmp, c * sizeof *buf);
                }
                pos += c;
            }
        }
    }
done:
    free(seen);
    free(lst);
    free(tmp);
    free(cnt);
    return pos;
}

#undef T
#undef SUF
