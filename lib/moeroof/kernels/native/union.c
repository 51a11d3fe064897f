/* The union model's kernel: sums of elementwise products, each summed in numpy's pairwise order,
 * behind moeroof.models.union.power_sums (through moeroof/kernels/union.py).
 *
 * product_sums gives, for each requested pair (head row, tail row), the bits of numpy's
 * ``np.add.reduce(head[row] * tail[row])`` over a contiguous row of e doubles, without the
 * product array: each product rounded on its own (ISO C, no contraction into fused
 * multiply-adds), then added in the order of numpy's DOUBLE_pairwise_sum (blocks of at most 128
 * summed by 8 accumulators, longer rows split in two at a multiple of 8 near the middle, fewer
 * than 8 summed one by one), starting from the reduction's identity 0. For products that are
 * not negative (the union's x^B with x in [0, 1]) the result is numpy's bit for bit; a signed
 * zero may differ for negative inputs. */
#include <stdint.h>

#define PAIRWISE_BLOCK 128 /* numpy's PW_BLOCKSIZE */

void mr_product_sums(const double *head, const double *tails, const int64_t *tail_rows, int64_t n,
                     int64_t m, int64_t e, double *out);

static double pairwise_product_sum(const double *a, const double *b, int64_t n)
{
    if (n < 8) {
        double res = 0.;
        for (int64_t i = 0; i < n; i++) {
            res += a[i] * b[i];
        }
        return res;
    }
    if (n <= PAIRWISE_BLOCK) {
        /* eight named accumulators, not an array: kept in registers (an r[8] array was spilled
         * to the stack on every step), paired into SSE2 lanes by the compiler, each lane adding
         * in numpy's order */
        double r0 = a[0] * b[0], r1 = a[1] * b[1], r2 = a[2] * b[2], r3 = a[3] * b[3];
        double r4 = a[4] * b[4], r5 = a[5] * b[5], r6 = a[6] * b[6], r7 = a[7] * b[7];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8) {
            r0 += a[i] * b[i];
            r1 += a[i + 1] * b[i + 1];
            r2 += a[i + 2] * b[i + 2];
            r3 += a[i + 3] * b[i + 3];
            r4 += a[i + 4] * b[i + 4];
            r5 += a[i + 5] * b[i + 5];
            r6 += a[i + 6] * b[i + 6];
            r7 += a[i + 7] * b[i + 7];
        }
        double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
        for (; i < n; i++) {
            res += a[i] * b[i];
        }
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_product_sum(a, b, n2) + pairwise_product_sum(a + n2, b + n2, n - n2);
}

/* head (m, e); tails (t, m, e); tail_rows (n) indices into tails' first axis; out (n, m):
 * out[j, row] = 0 + pairwise sum over i of head[row, i] * tails[tail_rows[j], row, i]. The caller
 * checks the indices. */
void mr_product_sums(const double *head, const double *tails, const int64_t *tail_rows, int64_t n,
                     int64_t m, int64_t e, double *out)
{
    for (int64_t j = 0; j < n; j++) {
        const double *tail = tails + tail_rows[j] * m * e;
        for (int64_t row = 0; row < m; row++) {
            out[j * m + row] = 0. + pairwise_product_sum(head + row * e, tail + row * e, e);
        }
    }
}
