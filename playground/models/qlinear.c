/* y = x W^T + bias, W kept in blocks of 32 weights, computed in float32: Q4_1 (4-bit q, d and m per block),
Q8_0 (8-bit signed q, d per block) and Q8_16 (8-bit signed q, d per 16 weights). quant_weights.py reads a GGUF's
own blocks into them (Q4_0, Q5_0, Q4_K and Q6_K too: their values are the same d * q (+ m) in these forms).

Each block is expanded to float32 in registers (Q4_1: d * q + m, Q8: d * q, as the GGUF's dequantizer
does) and multiplied into up to ROWS rows of x at once: the weights stream from memory at 5 to 10 bits
each instead of 32, and a batch's rows share one expansion. The products are float32 throughout, so the
result is the dequantized weight's up to the order of the additions (and Q4_1's d * q + m rounded once, fused,
where the dequantizer rounds twice: at most one unit in the last place of a weight). Built by quant_weights.py with
-march=native for the machine it runs on: AVX-512, AVX2 + FMA, or portable C the compiler vectorizes.
Output features are split across `threads` (OpenMP) when it was compiled with it.
*/
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define QK 32 /* weights per block */
#define ROWS 8 /* rows of x per pass over W */
#define FEATURES 2 /* output features per pass over x */
/* Bytes of blocks asked for ahead of the ones multiplied: a model's weights stream from memory (they outgrow the
   caches), and the hardware's prefetcher alone left the kernel waiting on them (the embedded model's Q8_0 output
   layer, one row: 4.6 ms -> 3.1). */
#define AHEAD 2048
/* the cache line `bytes` past p, asked for: as an integer address, since it may lie past the array's end (a
   prefetch never faults there, but a pointer formed there would be undefined) */
#define ahead_of(p, bytes) __builtin_prefetch((const void *)((uintptr_t)(p) + (bytes)))

enum { Q4_1 = 0, Q8_0 = 1, Q8_16 = 2 };

#if defined(__AVX512F__)
#include <immintrin.h>
#define LANES 16
typedef __m512 vec;
#define vzero() _mm512_setzero_ps()
#define vset(v) _mm512_set1_ps(v)
#define vload(p) _mm512_loadu_ps(p)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vadd(a, b) _mm512_add_ps(a, b)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define in_register(v) __asm__("" : "+v"(v))

/* the sum of a's lanes: lanes i and i + 8 added, then i and i + 4, i and i + 2, 0 and 1 */
static inline float vsum(vec a) {
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); /* AVX512F alone */
    const __m256 x = _mm256_add_ps(_mm512_castps512_ps256(a), high);
    const __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 z = _mm_add_ps(y, _mm_movehl_ps(y, y));
    return _mm_cvtss_f32(_mm_add_ss(z, _mm_movehdup_ps(z)));
}

/* vsum of 16 vectors at once, each added in vsum's order (so equal to it bit for bit): lane 4g + k is a[g + 4k]'s */
static inline vec vsums(const vec *a) {
    vec v[8], u[4], t[2];
    for (int j = 0; j < 8; j++) /* half h: a[2j + h]'s lanes i + (i + 8) */
        v[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xEE));
    for (int j = 0; j < 4; j++) /* quarter g: a[4j + g]'s lanes i + (i + 4) */
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xDD));
    for (int j = 0; j < 2; j++) /* quarter g: a[8j + g]'s lanes i + (i + 2), then a[8j + 4 + g]'s */
        t[j] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * j], u[2 * j + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * j], u[2 * j + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], 0x88), _mm512_shuffle_ps(t[0], t[1], 0xDD));
}

static inline void expand_q4_1(const uint8_t *q, vec d, vec m, vec *w) {
    const __m128i nibble = _mm_set1_epi8(15), raw = _mm_loadu_si128((const __m128i *)q);
    const __m128i lo = _mm_and_si128(raw, nibble), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), nibble);
    w[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), d, m);
    w[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), d, m);
}

/* d0 scales the first 16 weights, d1 the last 16 (the same d for Q8_0) */
static inline void expand_q8(const int8_t *q, vec d0, vec d1, vec *w) {
    w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), d0);
    w[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)))), d1);
}

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LANES 8
typedef __m256 vec;
#define vzero() _mm256_setzero_ps()
#define vset(v) _mm256_set1_ps(v)
#define vload(p) _mm256_loadu_ps(p)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vadd(a, b) _mm256_add_ps(a, b)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define in_register(v) __asm__("" : "+v"(v))

/* the sum of a's lanes: lanes i and i + 4 added, then i and i + 2, 0 and 1 */
static inline float vsum(vec a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* vsum of 8 vectors at once, each added in vsum's order (so equal to it bit for bit): lane 4h + k is a[h + 2k]'s */
static inline vec vsums(const vec *a) {
    vec v[4], u[2];
    for (int j = 0; j < 4; j++) /* half h: a[2j + h]'s lanes i + (i + 4) */
        v[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x31));
    for (int j = 0; j < 2; j++) /* half h: a[4j + h]'s lanes i + (i + 2), then a[4j + 2 + h]'s */
        u[j] = _mm256_add_ps(_mm256_shuffle_ps(v[2 * j], v[2 * j + 1], 0x44),
                             _mm256_shuffle_ps(v[2 * j], v[2 * j + 1], 0xEE));
    return _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88), _mm256_shuffle_ps(u[0], u[1], 0xDD));
}

/* a byte shuffle that moves bytes a..a+3 (lower lane) and b..b+3 (upper lane) each into the low byte of a dword,
   zeroing the rest (-128: a zero byte) */
#define BYTES_TO_DWORDS(a, b)                                                                                     \
    _mm256_setr_epi8(a, -128, -128, -128, a + 1, -128, -128, -128, a + 2, -128, -128, -128, a + 3, -128, -128, -128, \
                     b, -128, -128, -128, b + 1, -128, -128, -128, b + 2, -128, -128, -128, b + 3, -128, -128, -128)

/* The 16 bytes in both lanes, two in-lane byte shuffles to dwords, then each byte's low and high nibble: where
   widening with vpmovzxbd took four of those (two micro-ops each on AMD's Zen 3, on the shuffle units the
   multiply-adds share). Every linear of the embedded model once on a Zen 3 EPYC (AVX2 only): one row 10.9 ->
   8.9 ms, eight rows 28.3 -> 25.9 (the same values: only the widening changed). */
static inline void expand_q4_1(const uint8_t *q, vec d, vec m, vec *w) {
    const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    const __m256i first = _mm256_shuffle_epi8(raw, BYTES_TO_DWORDS(0, 4)); /* bytes 0-7 */
    const __m256i second = _mm256_shuffle_epi8(raw, BYTES_TO_DWORDS(8, 12)), nibble = _mm256_set1_epi32(15);
    w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(first, nibble)), d, m); /* q 0-7: low nibbles */
    w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(second, nibble)), d, m);
    w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(first, 4)), d, m); /* q 16-23: high nibbles */
    w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(second, 4)), d, m);
}

/* (the same shuffles for signed bytes, each into a dword's high byte and shifted down, measured slower here) */
static inline void expand_q8(const int8_t *q, vec d0, vec d1, vec *w) {
    for (int v = 0; v < 4; v++)
        w[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * v)))),
                             v < 2 ? d0 : d1);
}

#else /* portable: 8-float vectors the compiler maps to the machine's SIMD */
#define LANES 8
typedef struct { float f[LANES]; } vec;
static inline vec vzero(void) { vec r = {{0}}; return r; }
static inline vec vset(float v) { vec r; for (int i = 0; i < LANES; i++) r.f[i] = v; return r; }
static inline vec vload(const float *p) { vec r; for (int i = 0; i < LANES; i++) r.f[i] = p[i]; return r; }
static inline vec vfma(vec a, vec b, vec c) { for (int i = 0; i < LANES; i++) c.f[i] += a.f[i] * b.f[i]; return c; }
static inline vec vadd(vec a, vec b) { for (int i = 0; i < LANES; i++) a.f[i] += b.f[i]; return a; }
static inline float vsum(vec a) { float s = 0; for (int i = 0; i < LANES; i++) s += a.f[i]; return s; }
#define in_register(v) ((void)0)

static inline void expand_q4_1(const uint8_t *q, vec d, vec m, vec *w) {
    for (int j = 0; j < QK / 2; j++) {
        w[j / LANES].f[j % LANES] = d.f[0] * (float)(q[j] & 15) + m.f[0];
        w[(j + QK / 2) / LANES].f[j % LANES] = d.f[0] * (float)(q[j] >> 4) + m.f[0];
    }
}

static inline void expand_q8(const int8_t *q, vec d0, vec d1, vec *w) {
    for (int j = 0; j < QK; j++) w[j / LANES].f[j % LANES] = (j < QK / 2 ? d0 : d1).f[0] * (float)q[j];
}
#endif

#define VECS (QK / LANES) /* vectors per block */

/* Output features o..o+F-1 for R rows of x, F * R accumulators: each block of x is loaded once for the F
   features and each block of W expanded once for the R rows. Two features at a time measured fastest with
   both vector widths (one left the multiply-adds waiting on each other: AVX2, one row, 31 ms -> 18). */
static inline __attribute__((always_inline)) void features(
    int format, const float *x, int in, const uint8_t *qs, const float *d, const float *m,
    const float *bias, float *y, int out, int o, const int F, const int R)
{
    const int blocks = in / QK;
    const int bytes = format == Q4_1 ? QK / 2 : QK, scales = format == Q8_16 ? 2 : 1;
    vec acc[FEATURES][ROWS], w[FEATURES][VECS];
    for (int f = 0; f < F; f++)
        for (int r = 0; r < R; r++) acc[f][r] = vzero();
    for (int b = 0; b < blocks; b++) {
        for (int f = 0; f < F; f++) {
            const size_t at = (size_t)(o + f) * blocks + b, ahead = at + AHEAD / bytes;
            ahead_of(qs, ahead * bytes);
            if (b % (16 / scales) == 0) { /* a cache line of scales */
                ahead_of(d, ahead * scales * sizeof(float));
                if (m) ahead_of(m, ahead * sizeof(float));
            }
            if (format == Q4_1)
                expand_q4_1(qs + at * bytes, vset(d[at]), vset(m[at]), w[f]);
            else if (format == Q8_0)
                expand_q8((const int8_t *)(qs + at * bytes), vset(d[at]), vset(d[at]), w[f]);
            else
                expand_q8((const int8_t *)(qs + at * bytes), vset(d[2 * at]), vset(d[2 * at + 1]), w[f]);
        }
        for (int r = 0; r < R; r++) {
            const float *xr = x + ((size_t)b * R + r) * QK; /* packed: block b of the R rows side by side */
            for (int v = 0; v < VECS; v++) {
                vec xv = vload(xr + v * LANES);
                in_register(xv); /* one load for the F features (compilers fold a load into each multiply-add) */
                for (int f = 0; f < F; f++) acc[f][r] = vfma(w[f][v], xv, acc[f][r]);
            }
        }
    }
#ifdef vstore
    if (2 * F * R > LANES) { /* the sums LANES at a time: under half the shuffles and adds of one by one */
        vec all[FEATURES * ROWS + LANES]; /* acc[f][r] at f * R + r, then zeros to a whole LANES */
        float sums[LANES];
        for (int k = 0; k < F * R; k++) all[k] = acc[k / R][k % R];
        for (int k = F * R; k < F * R + LANES; k++) all[k] = vzero();
        for (int k0 = 0; k0 < F * R; k0 += LANES) {
            vstore(sums, vsums(all + k0));
            for (int lane = 0; lane < LANES; lane++) {
                const int k = k0 + lane / 4 + LANES / 4 * (lane % 4), f = k / R, r = k % R;
                if (k < F * R) y[(size_t)r * out + o + f] = sums[lane] + (bias ? bias[o + f] : 0.0f);
            }
        }
        return;
    }
#endif
    for (int f = 0; f < F; f++)
        for (int r = 0; r < R; r++) y[(size_t)r * out + o + f] = vsum(acc[f][r]) + (bias ? bias[o + f] : 0.0f);
}

/* Output features from..to-1 (a multiple of FEATURES apart, or the last ones) for R rows of x (packed). The hot loop
   lives in a function of its own per format, outside any OpenMP region: compiled inside one it measured ~4% slower
   even at one thread (Zen 3, AVX2, every linear of the embedded model once, against a build without OpenMP: one
   row 9.3 ms against 8.9, eight rows 26.3 against 25.0). */
#define FEATURE_RANGE(FORMAT, R_)                                                                         \
    do {                                                                                                  \
        int o = from;                                                                                     \
        for (; o + FEATURES <= to; o += FEATURES) features(FORMAT, x, in, qs, d, m, bias, y, out, o, FEATURES, R_); \
        for (; o < to; o++) features(FORMAT, x, in, qs, d, m, bias, y, out, o, 1, R_);                   \
    } while (0)

static inline __attribute__((always_inline)) void feature_range(
    int format, const float *x, int R, int in, const uint8_t *qs, const float *d, const float *m,
    const float *bias, float *y, int out, int from, int to)
{
    switch (R) { /* a constant row count per case: the accumulators stay in registers */
    case 1: FEATURE_RANGE(format, 1); break;
    case 2: FEATURE_RANGE(format, 2); break;
    case 3: FEATURE_RANGE(format, 3); break;
    case 4: FEATURE_RANGE(format, 4); break;
    case 5: FEATURE_RANGE(format, 5); break;
    case 6: FEATURE_RANGE(format, 6); break;
    case 7: FEATURE_RANGE(format, 7); break;
    default: FEATURE_RANGE(format, 8); break;
    }
}

/* feature_range for one format, compiled for it */
typedef void (*range_of_format)(const float *x, int R, int in, const uint8_t *qs, const float *d, const float *m,
                                const float *bias, float *y, int out, int from, int to);
#define RANGE_OF(NAME, FORMAT)                                                                                \
    static __attribute__((noinline)) void NAME(const float *x, int R, int in, const uint8_t *qs, const float *d, \
                                               const float *m, const float *bias, float *y, int out, int from, int to) \
    {                                                                                                         \
        feature_range(FORMAT, x, R, in, qs, d, m, bias, y, out, from, to);                                    \
    }
RANGE_OF(q4_1_range, Q4_1)
RANGE_OF(q8_0_range, Q8_0)
RANGE_OF(q8_16_range, Q8_16)

/* Up to ROWS rows of x (rows x in) packed block by block: block b of each row, then block b + 1 of each, so that a
   pass reads one run of R * 128 bytes a block where it read R strided ones. One row is its own packing. Eight rows
   of every linear once (Zen 3, AVX2): ~25.3 + 6.8 ms (the output layer) -> 23.8 + 6.6; two rows 10.0 -> 9.9. */
static void pack(const float *x, int R, int in, float *packed)
{
    for (int b = 0; b < in / QK; b++)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < QK; k++) packed[((size_t)b * R + r) * QK + k] = x[(size_t)r * in + (size_t)b * QK + k];
}

/* Output features split across `threads` in contiguous runs of whole passes (FEATURES at a time). */
static void linear(range_of_format range, const float *x, int rows, int in, const uint8_t *qs, const float *d,
                   const float *m, const float *bias, float *y, int out, int threads)
{
    /* (aligned to a cache line, as torch's tensors are: a vector loaded across two lines costs more) */
    float *packed = rows > 1 ? aligned_alloc(64, sizeof(float) * (size_t)(rows < ROWS ? rows : ROWS) * in) : NULL;
    const int most = packed || rows == 1 ? ROWS : 1; /* (no memory for the packing: a row at a time, as packed) */
    const int passes = out / FEATURES;
    for (int r0 = 0; r0 < rows; r0 += most) {
        const int R = rows - r0 < most ? rows - r0 : most;
        const float *xr = x + (size_t)r0 * in;
        float *yr = y + (size_t)r0 * out;
        if (R > 1) {
            pack(xr, R, in, packed);
            xr = packed;
        }
        if (threads > 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int t = 0; t < threads; t++) {
                const int from = FEATURES * (int)((long)passes * t / threads);
                const int to = t == threads - 1 ? out : FEATURES * (int)((long)passes * (t + 1) / threads);
                range(xr, R, in, qs, d, m, bias, yr, out, from, to);
            }
        } else {
            range(xr, R, in, qs, d, m, bias, yr, out, 0, out);
        }
    }
    free(packed);
}

/* x: rows x in (float32, contiguous); qs: out x in/32 blocks of 16 bytes; d, m: out x in/32; y: rows x out. */
void q4_1_linear(const float *x, int rows, int in, const uint8_t *qs, const float *d, const float *m,
                 const float *bias, float *y, int out, int threads)
{
    linear(q4_1_range, x, rows, in, qs, d, m, bias, y, out, threads);
}

/* x: rows x in; qs: out x in/32 blocks of 32 signed bytes; d: out x in/32; y: rows x out. */
void q8_0_linear(const float *x, int rows, int in, const int8_t *qs, const float *d,
                 const float *bias, float *y, int out, int threads)
{
    linear(q8_0_range, x, rows, in, (const uint8_t *)qs, d, NULL, bias, y, out, threads);
}

/* x: rows x in; qs: out x in/32 blocks of 32 signed bytes; d: out x in/16 (one per 16 weights); y: rows x out. */
void q8_16_linear(const float *x, int rows, int in, const int8_t *qs, const float *d,
                  const float *bias, float *y, int out, int threads)
{
    linear(q8_16_range, x, rows, in, (const uint8_t *)qs, d, NULL, bias, y, out, threads);
}

/* Which of the paths above this build took: "avx512", "avx2" or "portable". */
const char *qlinear_isa(void)
{
#if defined(__AVX512F__)
    return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2";
#else
    return "portable";
#endif
}
