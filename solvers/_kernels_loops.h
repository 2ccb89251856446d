/* The loops of solvers/_kernels.c, included there once per instruction set: with LOOP_NAME(f) naming the
   variant (f_base, f_avx2) and LOOP_ATTR its target attribute. Every variant does the same IEEE operations
   on each entry, in the same order; a wider instruction set only does more entries at a time. */

/* out[j] = (w[0] x[0, j] + w[1] x[1, j] + ...) * fac[j]: blocks of entries summed over all rows in
   registers (one pass over out, not one per row); each entry sees the operations of the row-by-row form,
   in the same order. GCC / clang vector types of 4 doubles (two SSE2 registers, or one AVX2 register):
   they only say "these four entries, alike". */
LOOP_ATTR static void LOOP_NAME(wsum)(Py_ssize_t nw, const double *w, const double *x, Py_ssize_t n,
                                      const double *fac, double *out)
{
    Py_ssize_t j = 0;
#if defined(__GNUC__)
    for (; j + 16 <= n; j += 16) {
        const v4d w0 = {w[0], w[0], w[0], w[0]};
        v4d a = w0 * V4(x + j), b = w0 * V4(x + j + 4), c = w0 * V4(x + j + 8),
            d = w0 * V4(x + j + 12);
        for (Py_ssize_t r = 1; r < nw; r++) {
            const double *xr = x + r * n + j;
            const v4d wr = {w[r], w[r], w[r], w[r]};
            a = a + wr * V4(xr);
            b = b + wr * V4(xr + 4);
            c = c + wr * V4(xr + 8);
            d = d + wr * V4(xr + 12);
        }
        if (fac) {
            a = a * V4(fac + j);
            b = b * V4(fac + j + 4);
            c = c * V4(fac + j + 8);
            d = d * V4(fac + j + 12);
        }
        V4(out + j) = a;
        V4(out + j + 4) = b;
        V4(out + j + 8) = c;
        V4(out + j + 12) = d;
    }
#endif
    for (; j < n; j++) {
        double acc = w[0] * x[j];
        for (Py_ssize_t r = 1; r < nw; r++)
            acc = acc + w[r] * x[r * n + j];
        out[j] = fac ? acc * fac[j] : acc;
    }
}

/* out = a * b on n / 2 complex numbers (re, im pairs): (ar br - ai bi, ar bi + ai br) */
LOOP_ATTR static void LOOP_NAME(cmul)(Py_ssize_t n, const double *a, const double *b, double *out)
{
    for (Py_ssize_t j = 0; j < n; j += 2) {
        const double ar = a[j], ai = a[j + 1], br = b[j], bi = b[j + 1];
        out[j] = ar * br - ai * bi;
        out[j + 1] = ar * bi + ai * br;
    }
}

/* g = gamma g + drift (gamma 1: no product; drift NULL: no sum), out = rho g */
LOOP_ATTR static void LOOP_NAME(flux)(Py_ssize_t n, const double *rho, double *g, double gamma,
                                      const double *drift, double *out)
{
    if (gamma != 1.0 && drift)
        for (Py_ssize_t j = 0; j < n; j++) {
            const double w = gamma * g[j] + drift[j];
            g[j] = w;
            out[j] = rho[j] * w;
        }
    else if (drift)
        for (Py_ssize_t j = 0; j < n; j++) {
            const double w = g[j] + drift[j];
            g[j] = w;
            out[j] = rho[j] * w;
        }
    else {
        if (gamma != 1.0)
            for (Py_ssize_t j = 0; j < n; j++)
                g[j] = gamma * g[j];
        for (Py_ssize_t j = 0; j < n; j++)
            out[j] = rho[j] * g[j];
    }
}

/* dst[j] = src[j] * fac[j] (fac NULL: a copy) for j < n, then zeros up to m */
LOOP_ATTR static void LOOP_NAME(scale_pad)(Py_ssize_t n, const double *src, const double *fac,
                                           double *dst, Py_ssize_t m)
{
    if (fac)
        for (Py_ssize_t j = 0; j < n; j++)
            dst[j] = src[j] * fac[j];
    else
        for (Py_ssize_t j = 0; j < n; j++)
            dst[j] = src[j];
    for (Py_ssize_t j = n; j < m; j++)
        dst[j] = 0.0;
}
