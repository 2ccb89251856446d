/* Compiled loops of the time stepping, of the S^1 right-hand side and of the interaction sums (module
solvers._kernels).

Why compiled: a step of the S^1 PDE at K = 1024 modes is some 80 numpy calls on arrays of a few thousand
doubles, each costing more in call overhead than in arithmetic; these loops do the same arithmetic in a
handful of calls. The interaction sums (_sums_loops.h) are arithmetic on a few thousand points per call
that numpy would do through arrays of points x modes (or points x points).

Reproducibility: every result is a fixed sequence of IEEE double operations, the same on every machine.
Each output entry is computed on its own (vectorising over entries changes no bits), sums over the rows
of a stack run in row order, the sums over points keep 8 partial sums added in one order (_sums_loops.h), and the build disables the contraction of a * b + c into a fused
multiply-add (-ffp-contract=off, setup.py), which some CPUs have and others lack. Arrays are passed
as objects with the buffer protocol (numpy arrays), which must be C-contiguous, of float64 (complex128 seen
as pairs of float64) and of the sizes stated; a mismatch raises ValueError.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef struct {
    Py_buffer b;
    int held;
} Buf;

static void release(Buf *bufs, int n)
{
    for (int i = 0; i < n; i++)
        if (bufs[i].held) {
            PyBuffer_Release(&bufs[i].b);
            bufs[i].held = 0;
        }
}

/* A C-contiguous buffer of doubles (None allowed when optional: then data is NULL); its length in doubles.
   kind: REAL (float64), CPLX (complex128, as pairs of doubles) or ANY of the two; native byte order. */
enum { REAL = 1, CPLX = 2, ANY = 3 };

static int get(PyObject *obj, Buf *buf, int writable, int optional, int kind, const char *name, double **data,
               Py_ssize_t *n)
{
    buf->held = 0;
    if (obj == Py_None && optional) {
        *data = NULL;
        *n = 0;
        return 0;
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &buf->b, flags) < 0)
        return -1;
    buf->held = 1;
    const char *f = buf->b.format ? buf->b.format : "B";
#if PY_LITTLE_ENDIAN
    if (f[0] == '<' || f[0] == '=' || f[0] == '@')
#else
    if (f[0] == '>' || f[0] == '!' || f[0] == '=' || f[0] == '@')
#endif
        f++;
    const int got = (f[0] == 'd' && f[1] == 0) ? REAL : (f[0] == 'Z' && f[1] == 'd' && f[2] == 0) ? CPLX : 0;
    if (!(got & kind)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %s data in native byte order, got format '%s'", name,
                     kind == REAL ? "float64" : kind == CPLX ? "complex128" : "float64 or complex128",
                     buf->b.format ? buf->b.format : "B");
        return -1;
    }
    *data = (double *)buf->b.buf;
    *n = buf->b.len / (Py_ssize_t)sizeof(double);
    return 0;
}

/* the start of every function: its argument count checked, its buffers marked as not held (nbuf of them) */
static int start(const char *fn, Py_ssize_t nargs, Py_ssize_t want, Buf *bufs, int nbuf)
{
    memset(bufs, 0, (size_t)nbuf * sizeof *bufs);
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", fn, want, nargs);
        return 0;
    }
    return 1;
}

/* The loops (_kernels_loops.h) are compiled twice on x86-64 with GCC or clang: for the baseline (SSE2)
   and for AVX2; the module uses the AVX2 ones on a CPU that has AVX2 (simd() tells which, and sets it).
   Both do the same IEEE operations on each entry, in the same order: AVX2 only does more entries at a
   time, and fused multiply-adds (the separate FMA extension) are neither enabled nor, with
   -ffp-contract=off, formed (tests/test_kernels.py compares the two variants bit for bit). */
#if defined(__GNUC__)
/* 4 doubles at any 8-byte aligned address (unaligned vector loads and stores), aliasing plain doubles */
typedef double v4d __attribute__((vector_size(32), aligned(8), may_alias));
#define V4(p) (*(v4d *)(p))
#endif

#define LOOP_ATTR
#define LOOP_NAME(f) f##_base
#include "_kernels_loops.h"
#undef LOOP_ATTR
#undef LOOP_NAME

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__INTEL_COMPILER)
#define HAVE_AVX2_LOOPS 1
#define LOOP_ATTR __attribute__((target("avx2")))
#define LOOP_NAME(f) f##_avx2
#include "_kernels_loops.h"
#undef LOOP_ATTR
#undef LOOP_NAME
#endif

/* The interaction sums' loops (_sums_loops.h), compiled three times on x86-64 with GCC or clang: baseline
   (SSE2: 2 doubles a register), AVX2 (4) and AVX-512 F (8); the same bits in every variant (see there). */
#if defined(__GNUC__) && !defined(__clang__)
/* the registers are passed only between always-inlined functions of one variant: no call sees the vector ABI */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define LOOP_ATTR
#define LOOP_NAME(f) f##_base
#define LOOP_VW 2
#include "_sums_loops.h"
#undef LOOP_ATTR
#undef LOOP_NAME
#undef LOOP_VW

#ifdef HAVE_AVX2_LOOPS
#define LOOP_ATTR __attribute__((target("avx2")))
#define LOOP_NAME(f) f##_avx2
#define LOOP_VW 4
#include "_sums_loops.h"
#undef LOOP_ATTR
#undef LOOP_NAME
#undef LOOP_VW
#define LOOP_ATTR __attribute__((target("avx512f")))
#define LOOP_NAME(f) f##_avx512
#define LOOP_VW 8
#include "_sums_loops.h"
#undef LOOP_ATTR
#undef LOOP_NAME
#undef LOOP_VW
#endif

typedef struct {
    void (*direct)(Py_ssize_t, Py_ssize_t, Py_ssize_t, const double *, const double *, const double *, double,
                   double *, double *, double *);
    void (*circle_coef)(Py_ssize_t, const double *, const double *, Py_ssize_t, double *, double *);
    void (*circle_eval)(Py_ssize_t, const double *, Py_ssize_t, const double *, double *, double *);
    void (*sphere_coef)(Py_ssize_t, const double *, const double *, Py_ssize_t, const double *, const double *,
                        const double *, double *, double *);
    void (*sphere_eval)(Py_ssize_t, const double *, Py_ssize_t, const double *, const double *, const double *,
                        const double *, const double *, double, double, double *, double *);
    void (*sphere_angles)(Py_ssize_t, const double *, double *);
    void (*sphere_tangent)(Py_ssize_t, const double *, const double *, double *);
} SumLoops;

static const SumLoops sums_base = {direct_base, circle_coef_base, circle_eval_base, sphere_coef_base,
                                   sphere_eval_base, sphere_angles_base, sphere_tangent_base};
#ifdef HAVE_AVX2_LOOPS
static const SumLoops sums_avx2 = {direct_avx2, circle_coef_avx2, circle_eval_avx2, sphere_coef_avx2,
                                   sphere_eval_avx2, sphere_angles_avx2, sphere_tangent_avx2};
static const SumLoops sums_avx512 = {direct_avx512, circle_coef_avx512, circle_eval_avx512, sphere_coef_avx512,
                                     sphere_eval_avx512, sphere_angles_avx512, sphere_tangent_avx512};
#endif
static const SumLoops *S = &sums_base;

typedef struct {
    const char *name;
    void (*wsum)(Py_ssize_t, const double *, const double *, Py_ssize_t, const double *, double *);
    void (*cmul)(Py_ssize_t, const double *, const double *, double *);
    void (*flux)(Py_ssize_t, const double *, double *, double, const double *, double *);
    void (*scale_pad)(Py_ssize_t, const double *, const double *, double *, Py_ssize_t);
} Loops;

static const Loops loops_base = {"baseline", wsum_base, cmul_base, flux_base, scale_pad_base};
#ifdef HAVE_AVX2_LOOPS
static const Loops loops_avx2 = {"avx2", wsum_avx2, cmul_avx2, flux_avx2, scale_pad_avx2};
#endif
static const Loops *L = &loops_base;

static int has_avx2(void)
{
#ifdef HAVE_AVX2_LOOPS
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

static int has_avx512(void)
{
#ifdef HAVE_AVX2_LOOPS
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* min and max of x into lo, hi; NaN if x holds a NaN (as numpy's minimum / maximum reductions). Min and
   max are exact, so the order of the comparisons changes nothing but the sign of a zero extreme. On x86-64
   two lanes of SSE2 (every x86-64 CPU has it; compilers do not vectorise these loops by themselves,
   because of NaN and signed zeros), elsewhere one lane. */
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#endif
static void minmax_loop(Py_ssize_t n, const double *x, double *lo, double *hi)
{
    double a = INFINITY, b = -INFINITY;
    int nan = 0;
    Py_ssize_t j = 0;
#if defined(__x86_64__) || defined(_M_X64)
    __m128d l0 = _mm_set1_pd(INFINITY), l1 = l0, h0 = _mm_set1_pd(-INFINITY), h1 = h0;
    __m128d bad = _mm_setzero_pd();
    for (; j + 4 <= n; j += 4) {
        const __m128d u = _mm_loadu_pd(x + j), v = _mm_loadu_pd(x + j + 2);
        l0 = _mm_min_pd(l0, u);
        l1 = _mm_min_pd(l1, v);
        h0 = _mm_max_pd(h0, u);
        h1 = _mm_max_pd(h1, v);
        bad = _mm_or_pd(bad, _mm_or_pd(_mm_cmpunord_pd(u, u), _mm_cmpunord_pd(v, v)));
    }
    double l[4], h[4], f[2];
    _mm_storeu_pd(l, l0);
    _mm_storeu_pd(l + 2, l1);
    _mm_storeu_pd(h, h0);
    _mm_storeu_pd(h + 2, h1);
    _mm_storeu_pd(f, bad);
    nan = f[0] != 0.0 || f[1] != 0.0;     /* a lane's mask: all bits 0 (+0.0) or all 1 (a NaN) */
    for (int k = 0; k < 4; k++) {
        a = l[k] < a ? l[k] : a;
        b = h[k] > b ? h[k] : b;
    }
#endif
    for (; j < n; j++) {
        const double v = x[j];
        nan |= v != v;
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    *lo = nan ? NAN : a;
    *hi = nan ? NAN : b;
}

/* weighted_sum(w, stack, out, factor): out[j] = (w[0] stack[0, j] + w[1] stack[1, j] + ...) * factor[j]
   (rows added in order; factor None: no product). stack holds len(w) rows of len(out) doubles. */
static PyObject *weighted_sum(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[4];
    if (!start("weighted_sum", nargs, 4, b, 4))
        return NULL;
    double *w, *x, *out, *fac;
    Py_ssize_t nw, nx, n, nf;
    if (get(args[0], &b[0], 0, 0, REAL, "w", &w, &nw) || get(args[1], &b[1], 0, 0, REAL, "stack", &x, &nx)
        || get(args[2], &b[2], 1, 0, REAL, "out", &out, &n)
        || get(args[3], &b[3], 0, 1, REAL, "factor", &fac, &nf))
        goto fail;
    if (nw < 1 || nx != nw * n || (fac && nf != n)) {
        PyErr_Format(PyExc_ValueError, "weighted_sum: %zd weights, a stack of %zd doubles, out of %zd and "
                     "factor of %zd: the stack must hold len(w) rows of len(out)", nw, nx, n, nf);
        goto fail;
    }
    L->wsum(nw, w, x, n, fac, out);
    release(b, 4);
    Py_RETURN_NONE;
fail:
    release(b, 4);
    return NULL;
}

/* complex_multiply(a, b, out): out = a * b entrywise, complex numbers as (re, im) pairs of doubles:
   (ar br - ai bi, ar bi + ai br). out may be a or b. */
static PyObject *complex_multiply(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[3];
    if (!start("complex_multiply", nargs, 3, b, 3))
        return NULL;
    double *a, *c, *out;
    Py_ssize_t na, nc, n;
    if (get(args[0], &b[0], 0, 0, CPLX, "a", &a, &na) || get(args[1], &b[1], 0, 0, CPLX, "b", &c, &nc)
        || get(args[2], &b[2], 1, 0, CPLX, "out", &out, &n))
        goto fail;
    if (na != n || nc != n || n % 2) {
        PyErr_Format(PyExc_ValueError, "complex_multiply: sizes %zd, %zd, %zd doubles differ (or are odd)",
                     na, nc, n);
        goto fail;
    }
    L->cmul(n, a, c, out);
    release(b, 3);
    Py_RETURN_NONE;
fail:
    release(b, 3);
    return NULL;
}

/* load_spectrum(c, factor, spec, ncols, mult): the input of a batch of inverse real transforms.
   spec is (rows, ncols) complex; row 0 gets c (K complex, K <= ncols; times factor entrywise on the
   doubles, when given) and zeros after it; row q >= 1 gets row 0's first Ka entries times mult[q - 1]
   (mult: (rows - 1, Ka) complex, products as in complex_multiply) and zeros after them. */
static PyObject *load_spectrum(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[4];
    if (!start("load_spectrum", nargs, 5, b, 4))
        return NULL;
    double *c, *fac, *spec, *mult;
    Py_ssize_t nc, nf, ns, nm;
    Py_ssize_t ncols = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (ncols == -1 && PyErr_Occurred())
        return NULL;
    if (get(args[0], &b[0], 0, 0, ANY, "c", &c, &nc) || get(args[1], &b[1], 0, 1, REAL, "factor", &fac, &nf)
        || get(args[2], &b[2], 1, 0, CPLX, "spec", &spec, &ns)
        || get(args[4], &b[3], 0, 1, CPLX, "mult", &mult, &nm))
        goto fail;
    Py_ssize_t row = 2 * ncols;
    if (ncols < 1 || ns < row || ns % row || nc % 2 || nc > row || (fac && nf != nc)) {
        PyErr_Format(PyExc_ValueError, "load_spectrum: c of %zd doubles, factor of %zd, spec of %zd (at "
                     "least one row of %zd complex)", nc, nf, ns, ncols);
        goto fail;
    }
    Py_ssize_t nkern = ns / row - 1;
    Py_ssize_t ka = nkern > 0 ? nm / (2 * nkern) : 0;
    if ((nkern > 0 && (!mult || nm != 2 * nkern * ka || 2 * ka > nc)) || (nkern == 0 && nm)) {
        PyErr_Format(PyExc_ValueError, "load_spectrum: %zd kernel rows need multipliers of 2 x rows x Ka "
                     "doubles, Ka <= len(c); got %zd", nkern, nm);
        goto fail;
    }
    L->scale_pad(nc, c, fac, spec, row);
    for (Py_ssize_t q = 0; q < nkern; q++) {
        double *dst = spec + (q + 1) * row;
        L->cmul(2 * ka, spec, mult + 2 * q * ka, dst);
        L->scale_pad(0, NULL, NULL, dst + 2 * ka, row - 2 * ka);
    }
    release(b, 4);
    Py_RETURN_NONE;
fail:
    release(b, 4);
    return NULL;
}

/* affine_flux(rho, g, gamma, drift, out, mm): w = gamma g + drift into g (gamma 1: g + drift; drift
   None: gamma g), out = rho w; mm (4 doubles, or None) gets min rho, max rho, min w, max w, where a NaN
   anywhere makes both of its extremes NaN (as numpy's minimum and maximum do). */
static PyObject *affine_flux(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[5];
    if (!start("affine_flux", nargs, 6, b, 5))
        return NULL;
    double *rho, *g, *drift, *out, *mm;
    Py_ssize_t nr, ng, nd, no, nmm;
    const double gamma = PyFloat_AsDouble(args[2]);
    if (gamma == -1.0 && PyErr_Occurred())
        return NULL;
    if (get(args[0], &b[0], 0, 0, REAL, "rho", &rho, &nr) || get(args[1], &b[1], 1, 0, REAL, "g", &g, &ng)
        || get(args[3], &b[2], 0, 1, REAL, "drift", &drift, &nd)
        || get(args[4], &b[3], 1, 0, REAL, "out", &out, &no) || get(args[5], &b[4], 1, 1, REAL, "mm", &mm, &nmm))
        goto fail;
    if (ng != nr || no != nr || (drift && nd != nr) || (mm && nmm != 4)) {
        PyErr_Format(PyExc_ValueError, "affine_flux: rho %zd, g %zd, drift %zd, out %zd doubles; mm %zd (4)",
                     nr, ng, nd, no, nmm);
        goto fail;
    }
    L->flux(nr, rho, g, gamma, drift, out);
    if (mm) {
        minmax_loop(nr, rho, mm, mm + 1);
        minmax_loop(nr, g, mm + 2, mm + 3);
    }
    release(b, 5);
    Py_RETURN_NONE;
fail:
    release(b, 5);
    return NULL;
}

/* simd(): the loops in use, "avx512", "avx2" or "baseline"; simd(name): use those (each only where the CPU has
   it; "avx512" runs the sums' loops with AVX-512 and the others with AVX2) */
static PyObject *simd(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "simd takes at most one argument");
        return NULL;
    }
    if (nargs == 1) {
        const char *name = PyUnicode_AsUTF8(args[0]);
        if (!name)
            return NULL;
        if (strcmp(name, "baseline") == 0) {
            L = &loops_base;
            S = &sums_base;
        }
#ifdef HAVE_AVX2_LOOPS
        else if (strcmp(name, "avx2") == 0 && has_avx2()) {
            L = &loops_avx2;
            S = &sums_avx2;
        }
        else if (strcmp(name, "avx512") == 0 && has_avx2() && has_avx512()) {
            L = &loops_avx2;
            S = &sums_avx512;
        }
#endif
        else {
            PyErr_Format(PyExc_ValueError, "simd: '%s' is not available here (baseline%s%s)", name,
                         has_avx2() ? ", avx2" : "", has_avx2() && has_avx512() ? ", avx512" : "");
            return NULL;
        }
    }
#ifdef HAVE_AVX2_LOOPS
    if (S == &sums_avx512)
        return PyUnicode_FromString("avx512");
#endif
    return PyUnicode_FromString(L->name);
}

/* ---- the interaction sums (the loops: _sums_loops.h) ---------------------------------------------------- */

/* n groups of 8 doubles, zeroed (NULL and MemoryError when they cannot be had) */
static double *zeroed_lanes(Py_ssize_t n)
{
    double *p = (double *)PyMem_RawCalloc((size_t)(n > 0 ? n : 1), 8 * sizeof(double));
    if (!p)
        PyErr_NoMemory();
    return p;
}

/* direct_sums(x, y, w, beta, psi, G): psi_i = sum_j w_j exp((<x_i, y_j> - 1) beta) and G_i = P_{x_i} H_i,
   H_i = sum_j w_j exp(..) y_j, for x (M, d), y (N, d), w (N), psi (M), G (M, d); d = len(G) / len(psi). */
static PyObject *direct_sums(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[5];
    if (!start("direct_sums", nargs, 6, b, 5))
        return NULL;
    double *x, *y, *w, *psi, *G;
    Py_ssize_t nx, ny, N, M, nG;
    const double beta = PyFloat_AsDouble(args[3]);
    if (beta == -1.0 && PyErr_Occurred())
        return NULL;
    if (get(args[0], &b[0], 0, 0, REAL, "x", &x, &nx) || get(args[1], &b[1], 0, 0, REAL, "y", &y, &ny)
        || get(args[2], &b[2], 0, 0, REAL, "w", &w, &N) || get(args[4], &b[3], 1, 0, REAL, "psi", &psi, &M)
        || get(args[5], &b[4], 1, 0, REAL, "G", &G, &nG))
        goto fail;
    const Py_ssize_t d = M > 0 ? nG / M : 0;
    if (M > 0 && (d < 1 || nG != M * d || nx != M * d || ny != N * d)) {
        PyErr_Format(PyExc_ValueError, "direct_sums: x %zd, y %zd, w %zd, psi %zd, G %zd doubles: want x and G "
                     "(M, d), y (N, d), w (N), psi (M)", nx, ny, N, M, nG);
        goto fail;
    }
    if (M > 0) {
        double *work = zeroed_lanes(2 * d);
        if (!work)
            goto fail;
        Py_BEGIN_ALLOW_THREADS
        S->direct(M, N, d, x, y, w, beta, psi, G, work);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(work);
    }
    release(b, 5);
    Py_RETURN_NONE;
fail:
    release(b, 5);
    return NULL;
}

/* circle_coefficients(y, w, c): c_k = sum_j w_j conj(z_j)^k, k = 0 .. K, for y (N, 2) (z = y_0 + i y_1),
   w (N), c complex (K + 1). */
static PyObject *circle_coefficients(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[3];
    if (!start("circle_coefficients", nargs, 3, b, 3))
        return NULL;
    double *y, *w, *c;
    Py_ssize_t ny, N, nc;
    if (get(args[0], &b[0], 0, 0, REAL, "y", &y, &ny) || get(args[1], &b[1], 0, 0, REAL, "w", &w, &N)
        || get(args[2], &b[2], 1, 0, CPLX, "c", &c, &nc))
        goto fail;
    if (ny != 2 * N || nc < 2) {
        PyErr_Format(PyExc_ValueError, "circle_coefficients: y %zd, w %zd, c %zd doubles: want y (N, 2), w (N), "
                     "c of K + 1 >= 1 complex", ny, N, nc);
        goto fail;
    }
    const Py_ssize_t K = nc / 2 - 1;
    double *acc = zeroed_lanes(2 * (K + 1));
    if (!acc)
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    S->circle_coef(N, y, w, K, acc, c);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(acc);
    release(b, 3);
    Py_RETURN_NONE;
fail:
    release(b, 3);
    return NULL;
}

/* circle_evaluate(x, c, mult, psi, G): with a_k = mult[k, 0] c_k and b_k = i mult[k, 1] c_k (each product
   rounded once: Re b = -(mult1 Im c), Im b = mult1 Re c), psi_i = sum_k Re(a_k z_i^k) and
   G_i = (sum_k Re(b_k z_i^k)) e_theta(x_i), for x (M, 2), c complex (K + 1), mult (K + 1, 2), psi (M), G (M, 2). */
static PyObject *circle_evaluate(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[5];
    if (!start("circle_evaluate", nargs, 5, b, 5))
        return NULL;
    double *x, *c, *mult, *psi, *G;
    Py_ssize_t nx, nc, nm, M, nG;
    if (get(args[0], &b[0], 0, 0, REAL, "x", &x, &nx) || get(args[1], &b[1], 0, 0, CPLX, "c", &c, &nc)
        || get(args[2], &b[2], 0, 0, REAL, "mult", &mult, &nm) || get(args[3], &b[3], 1, 0, REAL, "psi", &psi, &M)
        || get(args[4], &b[4], 1, 0, REAL, "G", &G, &nG))
        goto fail;
    if (nx != 2 * M || nG != 2 * M || nc < 2 || nm != nc) {
        PyErr_Format(PyExc_ValueError, "circle_evaluate: x %zd, c %zd, mult %zd, psi %zd, G %zd doubles: want x and "
                     "G (M, 2), c of K + 1 complex, mult (K + 1, 2), psi (M)", nx, nc, nm, M, nG);
        goto fail;
    }
    const Py_ssize_t K = nc / 2 - 1;
    double *ab = (double *)PyMem_RawMalloc((size_t)(4 * (K + 1)) * sizeof(double));
    if (!ab) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k <= K; k++) {
        ab[4 * k] = mult[2 * k] * c[2 * k];
        ab[4 * k + 1] = mult[2 * k] * c[2 * k + 1];
        ab[4 * k + 2] = -(mult[2 * k + 1] * c[2 * k + 1]);
        ab[4 * k + 3] = mult[2 * k + 1] * c[2 * k];
    }
    Py_BEGIN_ALLOW_THREADS
    S->circle_eval(M, x, K, ab, psi, G);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(ab);
    release(b, 5);
    Py_RETURN_NONE;
fail:
    release(b, 5);
    return NULL;
}

/* the tables of degree L = len(pmm) - 1: rec (4, nlm), nlm = (L + 1)(L + 2) / 2 */
static int sphere_tables(const char *fn, Py_ssize_t nrec, Py_ssize_t npmm, Py_ssize_t *L, Py_ssize_t *nlm)
{
    *L = npmm - 1;
    *nlm = (*L + 1) * (*L + 2) / 2;
    if (npmm < 1 || nrec != 4 * *nlm) {
        PyErr_Format(PyExc_ValueError, "%s: pmm %zd, rec %zd doubles: want L + 1 and 4 (L + 1)(L + 2) / 2", fn, npmm,
                     nrec);
        return -1;
    }
    return 0;
}

/* sphere_coefficients(y, w, rec, pmm, c): C_lm = sum_j w_j P_l^m(z_j) conj(u_j)^m (z = y_2, u = y_0 + i y_1;
   layout m, then l = m .. L), for y (N, 3), w (N), c complex (nlm); rec rows 0 and 1: the recurrence's a, b. */
static PyObject *sphere_coefficients(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[5];
    if (!start("sphere_coefficients", nargs, 5, b, 5))
        return NULL;
    double *y, *w, *rec, *pmm, *c;
    Py_ssize_t ny, N, nr, np, nc, L, nlm;
    if (get(args[0], &b[0], 0, 0, REAL, "y", &y, &ny) || get(args[1], &b[1], 0, 0, REAL, "w", &w, &N)
        || get(args[2], &b[2], 0, 0, REAL, "rec", &rec, &nr) || get(args[3], &b[3], 0, 0, REAL, "pmm", &pmm, &np)
        || get(args[4], &b[4], 1, 0, CPLX, "c", &c, &nc) || sphere_tables("sphere_coefficients", nr, np, &L, &nlm))
        goto fail;
    if (ny != 3 * N || nc != 2 * nlm) {
        PyErr_Format(PyExc_ValueError, "sphere_coefficients: y %zd, w %zd, c %zd doubles: want y (N, 3), w (N), "
                     "c of %zd complex", ny, N, nc, nlm);
        goto fail;
    }
    double *acc = zeroed_lanes(2 * nlm);
    if (!acc)
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    S->sphere_coef(N, y, w, L, rec, rec + nlm, pmm, acc, c);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(acc);
    release(b, 5);
    Py_RETURN_NONE;
fail:
    release(b, 5);
    return NULL;
}

/* sphere_evaluate(x, rec, pmm, c, lam0, beta, psi, G): with D = rec[2] c, E = rec[3] c (entrywise, each
   product rounded once) and psi0 = lam0 Re c_00, psi = psi0 + beta Phi and G = grad_S Phi of
   Phi = Re sum_lm D_lm P_l^m(z) u^m, for x (M, 3), c complex (nlm), psi (M), G (M, 3). */
static PyObject *sphere_evaluate(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[6];
    if (!start("sphere_evaluate", nargs, 8, b, 6))
        return NULL;
    double *x, *rec, *pmm, *c, *psi, *G;
    Py_ssize_t nx, nr, np, nc, M, nG, L, nlm;
    const double lam0 = PyFloat_AsDouble(args[4]);
    if (lam0 == -1.0 && PyErr_Occurred())
        return NULL;
    const double beta = PyFloat_AsDouble(args[5]);
    if (beta == -1.0 && PyErr_Occurred())
        return NULL;
    if (get(args[0], &b[0], 0, 0, REAL, "x", &x, &nx) || get(args[1], &b[1], 0, 0, REAL, "rec", &rec, &nr)
        || get(args[2], &b[2], 0, 0, REAL, "pmm", &pmm, &np) || get(args[3], &b[3], 0, 0, CPLX, "c", &c, &nc)
        || get(args[6], &b[4], 1, 0, REAL, "psi", &psi, &M) || get(args[7], &b[5], 1, 0, REAL, "G", &G, &nG)
        || sphere_tables("sphere_evaluate", nr, np, &L, &nlm))
        goto fail;
    if (nx != 3 * M || nG != 3 * M || nc != 2 * nlm) {
        PyErr_Format(PyExc_ValueError, "sphere_evaluate: x %zd, c %zd, psi %zd, G %zd doubles: want x and G (M, 3), "
                     "psi (M), c of %zd complex", nx, nc, M, nG, nlm);
        goto fail;
    }
    double *DE = (double *)PyMem_RawMalloc((size_t)(4 * nlm) * sizeof(double));
    if (!DE) {
        PyErr_NoMemory();
        goto fail;
    }
    const double *dm = rec + 2 * nlm, *em = rec + 3 * nlm;
    for (Py_ssize_t i = 0; i < nlm; i++) {
        DE[2 * i] = dm[i] * c[2 * i];
        DE[2 * i + 1] = dm[i] * c[2 * i + 1];
        DE[2 * nlm + 2 * i] = em[i] * c[2 * i];
        DE[2 * nlm + 2 * i + 1] = em[i] * c[2 * i + 1];
    }
    const double psi0 = lam0 * c[0];
    Py_BEGIN_ALLOW_THREADS
    S->sphere_eval(M, x, L, rec, rec + nlm, pmm, DE, DE + 2 * nlm, psi0, beta, psi, G);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(DE);
    release(b, 6);
    Py_RETURN_NONE;
fail:
    release(b, 6);
    return NULL;
}

/* sphere_angles(x, loc): loc (M, 2) = (theta, phi) of the unit vectors x (M, 3), ducc0's ranges
   (theta in [0, pi], phi in [0, 2 pi); phi = 0 at the poles) */
static PyObject *sphere_angles(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[2];
    if (!start("sphere_angles", nargs, 2, b, 2))
        return NULL;
    double *x, *loc;
    Py_ssize_t nx, nl;
    if (get(args[0], &b[0], 0, 0, REAL, "x", &x, &nx) || get(args[1], &b[1], 1, 0, REAL, "loc", &loc, &nl))
        goto fail;
    if (nx % 3 || nl != 2 * (nx / 3)) {
        PyErr_Format(PyExc_ValueError, "sphere_angles: x %zd, loc %zd doubles: want x (M, 3), loc (M, 2)", nx, nl);
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    S->sphere_angles(nx / 3, x, loc);
    Py_END_ALLOW_THREADS
    release(b, 2);
    Py_RETURN_NONE;
fail:
    release(b, 2);
    return NULL;
}

/* sphere_tangent(g, x, G): G (M, 3) = G_theta e_theta + G_phi e_phi at the unit vectors x (M, 3), g (2, M) */
static PyObject *sphere_tangent(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Buf b[3];
    if (!start("sphere_tangent", nargs, 3, b, 3))
        return NULL;
    double *g, *x, *G;
    Py_ssize_t ng, nx, nG;
    if (get(args[0], &b[0], 0, 0, REAL, "g", &g, &ng) || get(args[1], &b[1], 0, 0, REAL, "x", &x, &nx)
        || get(args[2], &b[2], 1, 0, REAL, "G", &G, &nG))
        goto fail;
    if (nx % 3 || ng != 2 * (nx / 3) || nG != nx) {
        PyErr_Format(PyExc_ValueError, "sphere_tangent: g %zd, x %zd, G %zd doubles: want g (2, M), x and G (M, 3)",
                     ng, nx, nG);
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    S->sphere_tangent(nx / 3, g, x, G);
    Py_END_ALLOW_THREADS
    release(b, 3);
    Py_RETURN_NONE;
fail:
    release(b, 3);
    return NULL;
}

static PyMethodDef methods[] = {
    {"weighted_sum", (PyCFunction)(void (*)(void))weighted_sum, METH_FASTCALL,
     "weighted_sum(w, stack, out, factor): out = (sum_r w[r] stack[r]) * factor, rows in order "
     "(factor None: no product)."},
    {"complex_multiply", (PyCFunction)(void (*)(void))complex_multiply, METH_FASTCALL,
     "complex_multiply(a, b, out): out = a * b entrywise (complex as pairs of doubles)."},
    {"load_spectrum", (PyCFunction)(void (*)(void))load_spectrum, METH_FASTCALL,
     "load_spectrum(c, factor, spec, ncols, mult): row 0 of spec = c (* factor), zero-padded; kernel "
     "rows = head of row 0 times mult, zero-padded."},
    {"affine_flux", (PyCFunction)(void (*)(void))affine_flux, METH_FASTCALL,
     "affine_flux(rho, g, gamma, drift, out, mm): g = gamma g + drift, out = rho g, mm = min/max of rho "
     "and g (or None)."},
    {"simd", (PyCFunction)(void (*)(void))simd, METH_FASTCALL,
     "simd([name]): the loops in use, 'avx512', 'avx2' or 'baseline' (the same bits); with a name, use those."},
    {"direct_sums", (PyCFunction)(void (*)(void))direct_sums, METH_FASTCALL,
     "direct_sums(x, y, w, beta, psi, G): the interaction sums Psi and G at x by direct summation."},
    {"circle_coefficients", (PyCFunction)(void (*)(void))circle_coefficients, METH_FASTCALL,
     "circle_coefficients(y, w, c): c_k = sum_j w_j conj(z_j)^k on S^1."},
    {"circle_evaluate", (PyCFunction)(void (*)(void))circle_evaluate, METH_FASTCALL,
     "circle_evaluate(x, c, mult, psi, G): psi = Re sum a_k z^k, G = Re(sum b_k z^k) e_theta on S^1."},
    {"sphere_coefficients", (PyCFunction)(void (*)(void))sphere_coefficients, METH_FASTCALL,
     "sphere_coefficients(y, w, rec, pmm, c): C_lm = sum_j w_j P_l^m(z_j) conj(u_j)^m on S^2."},
    {"sphere_evaluate", (PyCFunction)(void (*)(void))sphere_evaluate, METH_FASTCALL,
     "sphere_evaluate(x, rec, pmm, c, lam0, beta, psi, G): psi = lam0 c_00 + beta Phi, G = grad Phi on S^2."},
    {"sphere_angles", (PyCFunction)(void (*)(void))sphere_angles, METH_FASTCALL,
     "sphere_angles(x, loc): (theta, phi) of unit vectors on S^2, ducc0's ranges."},
    {"sphere_tangent", (PyCFunction)(void (*)(void))sphere_tangent, METH_FASTCALL,
     "sphere_tangent(g, x, G): G = G_theta e_theta + G_phi e_phi on S^2."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Compiled loops of attnpde's stepping and interaction sums (see solvers/_kernels.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
#ifdef HAVE_AVX2_LOOPS
    if (has_avx2()) {
        L = &loops_avx2;
        S = has_avx512() ? &sums_avx512 : &sums_avx2;
    }
#endif
    return PyModule_Create(&module);
}
