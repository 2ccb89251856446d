/* Compiled loops of the time stepping and of the S^1 right-hand side (module solvers._kernels).

Why compiled: a step of the S^1 PDE at K = 1024 modes is some 80 numpy calls on arrays of a few thousand
doubles, each costing more in call overhead than in arithmetic; these loops do the same arithmetic in a
handful of calls.

Reproducibility: every result is a fixed sequence of IEEE double operations, the same on every machine.
Each output entry is computed on its own (vectorising over entries changes no bits), sums over the rows
of a stack run in row order, and the build disables the contraction of a * b + c into a fused
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

/* simd(): the loops in use, "avx2" or "baseline"; simd(name): use those ("avx2" only where the CPU has it) */
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
        if (strcmp(name, "baseline") == 0)
            L = &loops_base;
#ifdef HAVE_AVX2_LOOPS
        else if (strcmp(name, "avx2") == 0 && has_avx2())
            L = &loops_avx2;
#endif
        else {
            PyErr_Format(PyExc_ValueError, "simd: '%s' is not available here (baseline%s)", name,
                         has_avx2() ? ", avx2" : "");
            return NULL;
        }
    }
    return PyUnicode_FromString(L->name);
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
     "simd([name]): the loops in use, 'avx2' or 'baseline' (the same bits); with a name, use those."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Compiled loops of attnpde's stepping (see solvers/_kernels.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
#ifdef HAVE_AVX2_LOOPS
    if (has_avx2())
        L = &loops_avx2;
#endif
    return PyModule_Create(&module);
}
