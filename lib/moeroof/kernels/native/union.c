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
        double r[8];
        int64_t i;
        for (int j = 0; j < 8; j++) {
            r[j] = a[j] * b[j];
        }
        for (i = 8; i < n - (n % 8); i += 8) {
            for (int j = 0; j < 8; j++) {
                r[j] += a[i + j] * b[i + j];
            }
        }
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
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
