/* The loops of the interaction sums (solvers/_kernels.c), included there once per instruction set, like
   _kernels_loops.h: LOOP_NAME(f) names the variant, LOOP_ATTR is its target attribute and LOOP_VW the
   doubles of its registers (2 SSE2, 4 AVX2, 8 AVX-512).

   Reproducibility: a loop computes each evaluation point on its own (the same IEEE operations in the same
   order, in any lane of any register), so the results do not depend on how many points a register holds.
   The only sums across points, the coefficients, are kept as 8 partial sums whatever the register width:
   partial l adds the sources j = l, l + 8, l + 16, ... in that order, and the 8 partials are added in one
   fixed order at the end (lane_sum). A caller adds the coefficients of fixed chunks of points in chunk
   order, so that the bits depend neither on the SIMD width nor on the number of threads. Points past the
   end of the last register are copies of the last point (evaluation: their results are not stored) and
   carry weight 0 (coefficients). */

#define VW LOOP_VW
#define VD LOOP_NAME(vd)
#define VU LOOP_NAME(vu)
/* registers carried at once through a loop: independent chains of operations for the pipelines */
#define NR 4

typedef double VD __attribute__((vector_size(8 * LOOP_VW), aligned(8), may_alias));
typedef unsigned long long VU __attribute__((vector_size(8 * LOOP_VW), aligned(8), may_alias));

/* v in every lane (v - 0 is v, also for -0) */
#define SPLAT(v) ((double)(v) - (VD){0})

/* mask ? a : b, lane by lane (mask: all bits set or none, as comparisons give) */
LOOP_ATTR static inline __attribute__((always_inline)) VD LOOP_NAME(select)(VU mask, VD a, VD b)
{
    return (VD)(((VU)a & mask) | ((VU)b & ~mask));
}

/* exp(x) lane by lane, within 1 ulp in the normal range (below 2^-1022 the result is subnormal or 0; above
   709.78, inf): n = rint(x / ln 2) by the 1.5 * 2^52 shift, r = x - n ln 2 in two parts (Cody and Waite:
   n ln2_hi is exact for |n| < 2^11), exp(r) by its Taylor polynomial of degree 13, evaluated by Estrin's
   scheme as written (|r| <= 0.347: the remainder is below 6e-18 relative), times 2^n1 2^n2 with n1 = rint(n / 2), n2 = n - n1,
   both normal powers of two made from their bits. x is first clamped to [-746, 710], where the result is
   0 and inf. */
LOOP_ATTR static inline __attribute__((always_inline)) VD LOOP_NAME(vexp)(VD x)
{
    const VD lo = SPLAT(-746.0), hi = SPLAT(710.0), shift = SPLAT(0x1.8p52);
    x = LOOP_NAME(select)((VU)(x < lo), lo, x);
    x = LOOP_NAME(select)((VU)(x > hi), hi, x);
    const VD n = (x * SPLAT(0x1.71547652b82fep0) + shift) - shift;
    VD r = x - n * SPLAT(0x1.62e42fee00000p-1);
    r = r - n * SPLAT(0x1.a39ef35793c76p-33);
    /* Estrin's scheme: the same polynomial in a few dependent steps (the loops' chains stay short) */
    const VD r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    const VD q0 = (SPLAT(1.0) + r) + r2 * (SPLAT(0.5) + r * SPLAT(1.0 / 6.0));
    const VD q1 = (SPLAT(1.0 / 24.0) + r * SPLAT(1.0 / 120.0)) + r2 * (SPLAT(1.0 / 720.0) + r * SPLAT(1.0 / 5040.0));
    const VD q2 = (SPLAT(1.0 / 40320.0) + r * SPLAT(1.0 / 362880.0))
                  + r2 * (SPLAT(1.0 / 3628800.0) + r * SPLAT(1.0 / 39916800.0));
    const VD q3 = SPLAT(1.0 / 479001600.0) + r * SPLAT(1.0 / 6227020800.0);
    const VD p = (q0 + r4 * q1) + r8 * (q2 + r4 * q3);
    const VD n1 = (n * SPLAT(0.5) + shift) - shift;
    const VD n2 = n - n1;
    /* the low 12 bits of n + 1.5 * 2^52 are n modulo 2^12: shifted into the exponent field, plus the bias */
    const VU bias = (VU){0} + (1023ULL << 52);
    const VD s1 = (VD)(((VU)(n1 + shift) << 52) + bias), s2 = (VD)(((VU)(n2 + shift) << 52) + bias);
    return (p * s1) * s2;
}

/* the 8 partial sums of acc, added in the one order of every variant */
LOOP_ATTR static inline __attribute__((always_inline)) double LOOP_NAME(lane_sum)(const double *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* the component k of the points i0 .. i0 + VW - 1 of an (n, d) array, the last point repeated past n */
LOOP_ATTR static inline __attribute__((always_inline)) VD LOOP_NAME(lanes)(const double *x, Py_ssize_t n,
                                                                           Py_ssize_t d, Py_ssize_t i0, Py_ssize_t k)
{
    VD v;
    for (int l = 0; l < VW; l++)
        v[l] = x[(i0 + l < n ? i0 + l : n - 1) * d + k];
    return v;
}

/* the weights of the sources j0 .. j0 + VW - 1, 0 past n */
LOOP_ATTR static inline __attribute__((always_inline)) VD LOOP_NAME(weights)(const double *w, Py_ssize_t n,
                                                                             Py_ssize_t j0)
{
    VD v;
    for (int l = 0; l < VW; l++)
        v[l] = j0 + l < n ? w[j0 + l] : 0.0;
    return v;
}

/* the partial sums (8 doubles) that the sources j0 .. j0 + VW - 1 add to (j0 a multiple of VW) */
#define PART(acc, j0) (*(VD *)((acc) + ((j0) & 7)))

/* store the first lanes of v (up to n - i0 of them) at out[(i0 + l) * d + k] */
LOOP_ATTR static inline __attribute__((always_inline)) void LOOP_NAME(store)(VD v, double *out, Py_ssize_t n,
                                                                             Py_ssize_t d, Py_ssize_t i0, Py_ssize_t k)
{
    for (int l = 0; l < VW && i0 + l < n; l++)
        out[(i0 + l) * d + k] = v[l];
}

/* ---- direct sums, any d ------------------------------------------------------------------------------
   For the evaluation points i (lanes) and the sources j in order:
       t = x_i0 y_j0 + x_i1 y_j1 + ...  (in k order),   e = exp((t - 1) beta) * w_j,
       psi_i += e,   H_ik += e * y_jk,
   then G_i = H_i - <x_i, H_i> x_i (the dot product in k order, each component H_ik - dot * x_ik).
   work: 2 d VD (for d > 8). */
LOOP_ATTR static inline __attribute__((always_inline)) void LOOP_NAME(direct_rows)(
    Py_ssize_t i0, Py_ssize_t M, Py_ssize_t N, const Py_ssize_t d, const double *x, const double *y,
    const double *w, double beta, double *psi, double *G, VD *xv, VD *H)
{
    const VD b = SPLAT(beta), one = SPLAT(1.0);
    for (Py_ssize_t k = 0; k < d; k++) {
        xv[k] = LOOP_NAME(lanes)(x, M, d, i0, k);
        H[k] = SPLAT(0.0);
    }
    VD ps = SPLAT(0.0);
    for (Py_ssize_t j = 0; j < N; j++) {
        const double *yj = y + j * d;
        VD t = xv[0] * yj[0];
        for (Py_ssize_t k = 1; k < d; k++)
            t = t + xv[k] * yj[k];
        const VD e = LOOP_NAME(vexp)((t - one) * b) * w[j];
        ps = ps + e;
        for (Py_ssize_t k = 0; k < d; k++)
            H[k] = H[k] + e * yj[k];
    }
    VD dot = H[0] * xv[0];
    for (Py_ssize_t k = 1; k < d; k++)
        dot = dot + H[k] * xv[k];
    LOOP_NAME(store)(ps, psi, M, 1, i0, 0);
    for (Py_ssize_t k = 0; k < d; k++)
        LOOP_NAME(store)(H[k] - dot * xv[k], G, M, d, i0, k);
}

/* the rows of one d known to the compiler (its registers hold x_i and H_i) */
#define DIRECT_D(D) \
    case D: \
        for (Py_ssize_t i0 = 0; i0 < M; i0 += VW) \
            LOOP_NAME(direct_rows)(i0, M, N, D, x, y, w, beta, psi, G, xv, H); \
        break;

LOOP_ATTR static void LOOP_NAME(direct)(Py_ssize_t M, Py_ssize_t N, Py_ssize_t d, const double *x, const double *y,
                                        const double *w, double beta, double *psi, double *G, double *work)
{
    VD xv[8], H[8];
    switch (d) {
        DIRECT_D(2)
        DIRECT_D(3)
        DIRECT_D(4)
        DIRECT_D(5)
        DIRECT_D(6)
        DIRECT_D(7)
        DIRECT_D(8)
    default:
        for (Py_ssize_t i0 = 0; i0 < M; i0 += VW)
            LOOP_NAME(direct_rows)(i0, M, N, d, x, y, w, beta, psi, G, (VD *)work, (VD *)work + d);
    }
}
#undef DIRECT_D

/* ---- S^1: the Bessel series ----------------------------------------------------------------------------
   Points as z = x_0 + i x_1; powers p_0 = 1, p_k = p_{k-1} z = (pr zr - pi zi, pr zi + pi zr).
   Coefficients c_k = sum_j w_j conj(z_j)^k: partial sums re += w pr, im -= w pi.
   acc: 16 (K + 1) doubles, zero; c: K + 1 complex. */
LOOP_ATTR static void LOOP_NAME(circle_coef)(Py_ssize_t N, const double *y, const double *w, Py_ssize_t K,
                                             double *acc, double *c)
{
    for (Py_ssize_t j0 = 0; j0 < N; j0 += NR * VW) {
        VD zr[NR], zi[NR], pr[NR], pi[NR], ww[NR];
        for (int q = 0; q < NR; q++) {
            const Py_ssize_t s = j0 + q * VW;
            ww[q] = LOOP_NAME(weights)(w, N, s);
            zr[q] = LOOP_NAME(lanes)(y, N, 2, s < N ? s : j0, 0);
            zi[q] = LOOP_NAME(lanes)(y, N, 2, s < N ? s : j0, 1);
            pr[q] = SPLAT(1.0);
            pi[q] = SPLAT(0.0);
        }
        for (Py_ssize_t k = 0; k <= K; k++) {
            double *ar = acc + 16 * k, *ai = ar + 8;
            for (int q = 0; q < NR; q++) {
                if (k > 0) {
                    const VD r = pr[q] * zr[q] - pi[q] * zi[q];
                    pi[q] = pr[q] * zi[q] + pi[q] * zr[q];
                    pr[q] = r;
                }
                PART(ar, q * VW) = PART(ar, q * VW) + ww[q] * pr[q];
                PART(ai, q * VW) = PART(ai, q * VW) - ww[q] * pi[q];
            }
        }
    }
    for (Py_ssize_t k = 0; k <= K; k++) {
        c[2 * k] = LOOP_NAME(lane_sum)(acc + 16 * k);
        c[2 * k + 1] = LOOP_NAME(lane_sum)(acc + 16 * k + 8);
    }
}

/* ab: the series' coefficients as 4 (K + 1) doubles (a_k re, a_k im, b_k re, b_k im):
   psi = sum_k (ar_k pr - ai_k pi), gth = sum_k (br_k pr - bi_k pi) in k order (from 0), G = gth e_theta,
   e_theta = (-x_1, x_0): G_0 = -(gth x_1), G_1 = gth x_0. */
LOOP_ATTR static void LOOP_NAME(circle_eval)(Py_ssize_t M, const double *x, Py_ssize_t K, const double *ab,
                                             double *psi, double *G)
{
    for (Py_ssize_t i0 = 0; i0 < M; i0 += NR * VW) {
        VD zr[NR], zi[NR], pr[NR], pi[NR], ps[NR], gt[NR];
        for (int q = 0; q < NR; q++) {
            const Py_ssize_t s = i0 + q * VW < M ? i0 + q * VW : i0;
            zr[q] = LOOP_NAME(lanes)(x, M, 2, s, 0);
            zi[q] = LOOP_NAME(lanes)(x, M, 2, s, 1);
            pr[q] = SPLAT(1.0);
            pi[q] = SPLAT(0.0);
            ps[q] = SPLAT(0.0);
            gt[q] = SPLAT(0.0);
        }
        for (Py_ssize_t k = 0; k <= K; k++) {
            const double *c = ab + 4 * k;
            for (int q = 0; q < NR; q++) {
                if (k > 0) {
                    const VD r = pr[q] * zr[q] - pi[q] * zi[q];
                    pi[q] = pr[q] * zi[q] + pi[q] * zr[q];
                    pr[q] = r;
                }
                ps[q] = ps[q] + (c[0] * pr[q] - c[1] * pi[q]);
                gt[q] = gt[q] + (c[2] * pr[q] - c[3] * pi[q]);
            }
        }
        for (int q = 0; q < NR; q++) {
            const Py_ssize_t s = i0 + q * VW;
            LOOP_NAME(store)(ps[q], psi, M, 1, s, 0);
            LOOP_NAME(store)(-(gt[q] * zi[q]), G, M, 2, s, 0);
            LOOP_NAME(store)(gt[q] * zr[q], G, M, 2, s, 1);
        }
    }
}

/* ---- S^2: the addition theorem ------------------------------------------------------------------------
   Points as z = x_2 and u = x_0 + i x_1 (|u| = sin theta). With the reduced normalised Legendre functions
   P_l^m(z) = sqrt((2l + 1) (l - m)! / (l + m)!) d^m P_l / dz^m (polynomials: Y_lm ~ P_l^m(z) u^m, no angles),
   by P_m^m = pmm[m] (constants) and, for l > m, P_l^m = rec_a[i] (z P_{l-1}^m) - rec_b[i] P_{l-2}^m
   (P_{m-1}^m = 0), i the index of (l, m) in the layout of m, then l = m .. L (ducc0's):
       coefficients C_lm = sum_j w_j P_l^m(z_j) conj(u_j)^m,
   with W_m = w conj(u)^m by W_m = W_{m-1} conj(u); partial sums re += P Wr, im += P Wi.
   acc: 16 nlm doubles, zero; c: nlm complex. */
LOOP_ATTR static void LOOP_NAME(sphere_coef)(Py_ssize_t N, const double *y, const double *w, Py_ssize_t L,
                                             const double *rec_a, const double *rec_b, const double *pmm,
                                             double *acc, double *c)
{
    const Py_ssize_t nlm = (L + 1) * (L + 2) / 2;
    for (Py_ssize_t j0 = 0; j0 < N; j0 += NR * VW) {
        VD z[NR], ur[NR], ui[NR], wr[NR], wi[NR];
        for (int q = 0; q < NR; q++) {
            const Py_ssize_t s = j0 + q * VW < N ? j0 + q * VW : j0;
            z[q] = LOOP_NAME(lanes)(y, N, 3, s, 2);
            ur[q] = LOOP_NAME(lanes)(y, N, 3, s, 0);
            ui[q] = LOOP_NAME(lanes)(y, N, 3, s, 1);
            wr[q] = LOOP_NAME(weights)(w, N, j0 + q * VW);
            wi[q] = SPLAT(0.0);
        }
        Py_ssize_t i = 0;
        for (Py_ssize_t m = 0; m <= L; m++) {
            VD p1[NR], p2[NR];
            for (int q = 0; q < NR; q++) {
                if (m > 0) {         /* W = W conj(u) = (Wr ur - Wi (-ui), Wr (-ui) + Wi ur) */
                    const VD r = wr[q] * ur[q] - wi[q] * (-ui[q]);
                    wi[q] = wr[q] * (-ui[q]) + wi[q] * ur[q];
                    wr[q] = r;
                }
                p1[q] = SPLAT(pmm[m]);
                p2[q] = SPLAT(0.0);
            }
            for (Py_ssize_t l = m; l <= L; l++, i++) {
                double *ar = acc + 16 * i, *ai = ar + 8;
                const double a = rec_a[i], b = rec_b[i];
                for (int q = 0; q < NR; q++) {
                    if (l > m) {
                        const VD p = a * (z[q] * p1[q]) - b * p2[q];
                        p2[q] = p1[q];
                        p1[q] = p;
                    }
                    PART(ar, q * VW) = PART(ar, q * VW) + p1[q] * wr[q];
                    PART(ai, q * VW) = PART(ai, q * VW) + p1[q] * wi[q];
                }
            }
        }
    }
    for (Py_ssize_t i = 0; i < nlm; i++) {
        c[2 * i] = LOOP_NAME(lane_sum)(acc + 16 * i);
        c[2 * i + 1] = LOOP_NAME(lane_sum)(acc + 16 * i + 8);
    }
}

/* The fields at x from D (2 nlm doubles: complex D_lm, the coefficients of Phi's series, eps_m = 2 for
   m > 0 included) and E (likewise, E_lm = D_lm sqrt((l - m)(l + m + 1)): d/dz P_l^m = sqrt(..) P_l^{m+1}).
   Phi = Re sum_m u^m B_m(z), B_m = sum_l D_lm P_l^m (l in order), taken as the polynomial in (x_0, x_1,
   x_2) it is, so that grad_S Phi = P_x grad Phi with
       d/dx_0 Phi = Re S, d/dx_1 Phi = -Im S,  S = sum_m m u^{m-1} B_m,
       d/dx_2 Phi = Re sum_m u^m B'_m,  B'_m = sum_l E_lm P_l^{m+1} (accumulated during column m + 1).
   Out: psi = psi0 + beta Phi, G = grad Phi - <x, grad Phi> x (the dot product in component order). The
   sums over m in m order, each term added once its column is done: Phi += Re(u^m B_m),
   S += m (u^{m-1} B_m), dz += Re(u^{m-1} B'_{m-1}). */
LOOP_ATTR static void LOOP_NAME(sphere_eval)(Py_ssize_t M, const double *x, Py_ssize_t L, const double *rec_a,
                                             const double *rec_b, const double *pmm, const double *D,
                                             const double *E, double psi0, double beta, double *psi, double *G)
{
    for (Py_ssize_t i0 = 0; i0 < M; i0 += NR * VW) {
        VD z[NR], ur[NR], ui[NR], Ur[NR], Ui[NR], Vr[NR], Vi[NR], F[NR], Sr[NR], Si[NR], Fz[NR];
        for (int q = 0; q < NR; q++) {
            const Py_ssize_t s = i0 + q * VW < M ? i0 + q * VW : i0;
            z[q] = LOOP_NAME(lanes)(x, M, 3, s, 2);
            ur[q] = LOOP_NAME(lanes)(x, M, 3, s, 0);
            ui[q] = LOOP_NAME(lanes)(x, M, 3, s, 1);
            Ur[q] = SPLAT(1.0);          /* u^m */
            Ui[q] = SPLAT(0.0);
            Vr[q] = SPLAT(0.0);          /* u^{m-1} */
            Vi[q] = SPLAT(0.0);
            F[q] = Sr[q] = Si[q] = Fz[q] = SPLAT(0.0);
        }
        Py_ssize_t i = 0, ip = 0;        /* the index of (l, m), and of (l, m - 1) */
        for (Py_ssize_t m = 0; m <= L; m++) {
            VD p1[NR], p2[NR], Br[NR], Bi[NR], Pr[NR], Pi[NR];
            if (m > 0)
                ip++;                    /* (m - 1, m - 1) is not used: its E is 0 */
            for (int q = 0; q < NR; q++) {
                p1[q] = SPLAT(pmm[m]);
                p2[q] = SPLAT(0.0);
                Br[q] = Bi[q] = Pr[q] = Pi[q] = SPLAT(0.0);
            }
            for (Py_ssize_t l = m; l <= L; l++, i++) {
                const double a = rec_a[i], b = rec_b[i], dr = D[2 * i], di = D[2 * i + 1];
                const double er = m > 0 ? E[2 * ip] : 0.0, ei = m > 0 ? E[2 * ip + 1] : 0.0;
                for (int q = 0; q < NR; q++) {
                    if (l > m) {
                        const VD p = a * (z[q] * p1[q]) - b * p2[q];
                        p2[q] = p1[q];
                        p1[q] = p;
                    }
                    Br[q] = Br[q] + dr * p1[q];
                    Bi[q] = Bi[q] + di * p1[q];
                    Pr[q] = Pr[q] + er * p1[q];
                    Pi[q] = Pi[q] + ei * p1[q];
                }
                if (m > 0)
                    ip++;
            }
            const double mm = (double)m;
            for (int q = 0; q < NR; q++) {
                F[q] = F[q] + (Ur[q] * Br[q] - Ui[q] * Bi[q]);
                if (m > 0) {
                    Sr[q] = Sr[q] + mm * (Vr[q] * Br[q] - Vi[q] * Bi[q]);
                    Si[q] = Si[q] + mm * (Vr[q] * Bi[q] + Vi[q] * Br[q]);
                    Fz[q] = Fz[q] + (Vr[q] * Pr[q] - Vi[q] * Pi[q]);
                }
                const VD r = Ur[q] * ur[q] - Ui[q] * ui[q];
                const VD s = Ur[q] * ui[q] + Ui[q] * ur[q];
                Vr[q] = Ur[q];
                Vi[q] = Ui[q];
                Ur[q] = r;
                Ui[q] = s;
            }
        }
        for (int q = 0; q < NR; q++) {
            const VD gx = Sr[q], gy = -Si[q], gz = Fz[q];
            const VD dot = (gx * ur[q] + gy * ui[q]) + gz * z[q];
            const Py_ssize_t s = i0 + q * VW;
            LOOP_NAME(store)(psi0 + beta * F[q], psi, M, 1, s, 0);
            LOOP_NAME(store)(gx - dot * ur[q], G, M, 3, s, 0);
            LOOP_NAME(store)(gy - dot * ui[q], G, M, 3, s, 1);
            LOOP_NAME(store)(gz - dot * z[q], G, M, 3, s, 2);
        }
    }
}

/* ---- S^2: angles and tangent vectors for ducc0's transforms ---------------------------------------------- */

/* atan2(y, x) lane by lane, within 2 ulp (not correctly rounded; the same bits in every variant): with
   t = min(|x|, |y|) / max(|x|, |y|) in [0, 1] (0 when both are 0), k = rint(8 t), c = k / 8 and
   t' = (t - c) / (1 + t c) (|t'| <= 1/16), atan t = atan c + atan t', atan t' by its Taylor polynomial of
   degree 13 (remainder below 1e-18 relative) and atan c from a table; then pi/2 - a where |y| > |x|,
   pi - a where x < 0, -a where y < 0. */
#ifndef ATAN_EIGHTHS
#define ATAN_EIGHTHS
static const double atan_eighths[9] = {
    0x0.0p+0, 0x1.fd5ba9aac2f6ep-4, 0x1.f5b75f92c80ddp-3, 0x1.6f61941e4def1p-2, 0x1.dac670561bb4fp-2,
    0x1.1e00babdefeb4p-1, 0x1.4978fa3269ee1p-1, 0x1.700a7c5784634p-1, 0x1.921fb54442d18p-1};
#endif

LOOP_ATTR static inline __attribute__((always_inline)) VD LOOP_NAME(vatan2)(VD y, VD x)
{
    const VD zero = SPLAT(0.0), shift = SPLAT(0x1.8p52);
    const VD ax = LOOP_NAME(select)((VU)(x < zero), -x, x), ay = LOOP_NAME(select)((VU)(y < zero), -y, y);
    const VU swap = (VU)(ay > ax);
    const VD big = LOOP_NAME(select)(swap, ay, ax), small = LOOP_NAME(select)(swap, ax, ay);
    const VD t = LOOP_NAME(select)((VU)(big > zero), small / LOOP_NAME(select)((VU)(big > zero), big, SPLAT(1.0)), zero);
    const VD kd = (t * SPLAT(8.0) + shift) - shift;
    const VD c = kd * SPLAT(0.125);
    const VD tp = (t - c) / (SPLAT(1.0) + t * c);
    const VD z = tp * tp;
    VD p = SPLAT(1.0 / 13.0);
    p = p * z - SPLAT(1.0 / 11.0);
    p = p * z + SPLAT(1.0 / 9.0);
    p = p * z - SPLAT(1.0 / 7.0);
    p = p * z + SPLAT(1.0 / 5.0);
    p = p * z - SPLAT(1.0 / 3.0);
    const VU ki = (VU)(kd + shift);
    VD base;
    for (int l = 0; l < VW; l++)
        base[l] = atan_eighths[ki[l] & 15];
    VD a = base + (tp + (tp * z) * p);
    a = LOOP_NAME(select)(swap, SPLAT(0x1.921fb54442d18p+0) - a, a);
    a = LOOP_NAME(select)((VU)(x < zero), SPLAT(0x1.921fb54442d18p+1) - a, a);
    return LOOP_NAME(select)((VU)(y < zero), -a, a);
}

/* s = sqrt(x_0 x_0 + x_1 x_1) = sin theta of the unit vectors i0 .. i0 + VW - 1 (the sum of the squares
   rounded, then the correctly rounded root) */
LOOP_ATTR static inline __attribute__((always_inline)) VD LOOP_NAME(sin_theta)(VD x0, VD x1)
{
    VD s = x0 * x0 + x1 * x1;
    for (int l = 0; l < VW; l++)
        s[l] = sqrt(s[l]);
    return s;
}

/* loc (M, 2) = (theta, phi) of the unit vectors x (M, 3): theta = atan2(s, x_2) in [0, pi], phi =
   atan2(x_1, x_0) in [0, 2 pi) (2 pi added to a negative one), phi = 0 where s = 0 (the poles) */
LOOP_ATTR static void LOOP_NAME(sphere_angles)(Py_ssize_t M, const double *x, double *loc)
{
    const VD zero = SPLAT(0.0);
    for (Py_ssize_t i0 = 0; i0 < M; i0 += VW) {
        const VD x0 = LOOP_NAME(lanes)(x, M, 3, i0, 0), x1 = LOOP_NAME(lanes)(x, M, 3, i0, 1);
        const VD x2 = LOOP_NAME(lanes)(x, M, 3, i0, 2);
        const VD s = LOOP_NAME(sin_theta)(x0, x1);
        VD phi = LOOP_NAME(vatan2)(x1, x0);
        phi = LOOP_NAME(select)((VU)(phi < zero), phi + SPLAT(0x1.921fb54442d18p+2), phi);
        phi = LOOP_NAME(select)((VU)(s == zero), zero, phi);
        LOOP_NAME(store)(LOOP_NAME(vatan2)(s, x2), loc, M, 2, i0, 0);
        LOOP_NAME(store)(phi, loc, M, 2, i0, 1);
    }
}

/* G (M, 3) = G_theta e_theta + G_phi e_phi at the unit vectors x (M, 3) from g = (G_theta, G_phi) (2, M):
   with s = sin theta, (cos phi, sin phi) = (x_0 / s, x_1 / s), or (1, 0) where s = 0, and zt = x_2 G_theta:
   G_0 = zt cos phi - G_phi sin phi, G_1 = zt sin phi + G_phi cos phi, G_2 = -(s G_theta) */
LOOP_ATTR static void LOOP_NAME(sphere_tangent)(Py_ssize_t M, const double *g, const double *x, double *G)
{
    const VD zero = SPLAT(0.0), one = SPLAT(1.0);
    for (Py_ssize_t i0 = 0; i0 < M; i0 += VW) {
        const VD x0 = LOOP_NAME(lanes)(x, M, 3, i0, 0), x1 = LOOP_NAME(lanes)(x, M, 3, i0, 1);
        const VD x2 = LOOP_NAME(lanes)(x, M, 3, i0, 2);
        const VD gt = LOOP_NAME(lanes)(g, M, 1, i0, 0), gp = LOOP_NAME(lanes)(g + M, M, 1, i0, 0);
        const VD s = LOOP_NAME(sin_theta)(x0, x1);
        const VU pole = (VU)(s == zero);
        const VD q = LOOP_NAME(select)(pole, one, s);
        const VD cph = LOOP_NAME(select)(pole, one, x0 / q), sph = LOOP_NAME(select)(pole, zero, x1 / q);
        const VD zt = x2 * gt;
        LOOP_NAME(store)(zt * cph - gp * sph, G, M, 3, i0, 0);
        LOOP_NAME(store)(zt * sph + gp * cph, G, M, 3, i0, 1);
        LOOP_NAME(store)(-(s * gt), G, M, 3, i0, 2);
    }
}

#undef VW
#undef VD
#undef VU
#undef NR
#undef SPLAT
#undef PART
