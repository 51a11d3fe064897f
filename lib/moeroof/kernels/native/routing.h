/* The compiled routing kernels (moeroof.kernels.routing loads them with ctypes).
 *
 * The inner loops of moeroof/models/routing.py: the prefix/suffix Poisson-binomial programme of
 * the inclusion probabilities and the top-K step of the trace sampler. Each gives the numbers of
 * the numpy code it replaced bit for bit (committed figures and traces depend on them): the same
 * operations in the same order, numpy's pairwise summation where numpy sums, libm's log and exp
 * where libm is what numpy calls, and no fused multiply-add (ISO C, -std=c11: GCC contracts
 * a*b + c*d into an FMA only under -ffp-contract=fast, which ISO modes turn off).
 *
 * Conventions: arrays are C-contiguous doubles unless declared otherwise, their shapes given as
 * int64 sizes beside them. A kernel that allocates returns 0, or -1 when malloc fails (the
 * caller raises MemoryError).
 */
#ifndef MOEROOF_ROUTING_H
#define MOEROOF_ROUTING_H
#include <stdint.h>

/* numpy's pairwise summation block (PW_BLOCKSIZE): the longest sum mr_pairwise_sum takes and the
 * largest K of mr_inclusion_below_k */
#define MR_PW_BLOCK 128

/* np.add.reduce of a[0..n-1], n <= 128 */
double mr_pairwise_sum(const double *a, int64_t n);

/* out[r, j, t] = P(N_{-j}(t) < k) for p (m, e, n), out (m, e, n); 1 <= k <= 128 */
int mr_inclusion_below_k(const double *p, int64_t m, int64_t e, int64_t n, int64_t k, double *out);

/* Generator.gumbel() from the uniforms it draws: out[i] = 0 - 1 * log(-log(1 - u[i])) */
void mr_gumbel_from_uniforms(const double *u, int64_t n, double *out);

/* per row of logq (rows, e): top[r] its largest entry (-inf when none is above -inf) and
 * rel[r, i] = exp(logq[r, i] - top[r]) (0 on a row whose top is -inf) */
void mr_log_weight_rows(const double *logq, int64_t rows, int64_t e, double *top, double *rel);

/* steps first .. first + n - 1 of the trace: logq, rel (rows, e), top (rows,), u (n, rows, e),
 * keep_u (n, rows, n_keep_cols), rho (rows,), out (first + n or more, rows, k) int32, read at
 * step first - 1 and written at the n steps */
int mr_top_k_steps(const double *logq, const double *top, const double *rel, const double *u,
                   int64_t n, int64_t rows, int64_t e, const double *keep_u, int64_t n_keep_cols,
                   const double *rho, int32_t *out, int64_t first, int64_t k);

#endif
