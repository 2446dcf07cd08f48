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

The same library holds a decode step's attention on the CPU (attend, at the end): one new query per row.
*/
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* One new query per row: a decode step's attention over each row's keys (the cache's and its own).

torch's sdpa spends most of such a step around its arithmetic (8 rows of 50 keys, 9 heads of 64 over 3
key-value heads: ~170 us a layer for ~0.5 million multiply-adds, 3.2 ms at 1,000 keys; Zen 3, 1 thread), so
each row's scores are LANES keys at a time in registers, their softmax a vectorized exp, and the weighted sum
of values one row of registers. float32 throughout; the sums differ from sdpa's in their order only. */

#define MAX_HEAD_DIM 256
#define MAX_GROUP 64 /* query heads per key-value head */

/* s[j] = exp(s[j] - best) for j < n (each s[j] <= best), in Cephes' expf form (within 2 units in the last
   place): 0 below e^-87 (a masked key's -infinity too), NaN for NaN (a broken score shows, as in sdpa). Only
   integer selects on the floats' bits, no float-to-int conversion and no overflow, so the compiler vectorizes
   the loop without relaxed floating-point flags. */
static void exp_shifted(float *s, int n, float best)
{
    const float lowest = -87.0f;
    const float not_a_number = NAN;
    int32_t lowest_bits, nan_bits;
    memcpy(&lowest_bits, &lowest, sizeof lowest_bits);
    memcpy(&nan_bits, &not_a_number, sizeof nan_bits);
    for (int j = 0; j < n; j++) {
        float x = s[j] - best;
        int32_t bits, k, out;
        memcpy(&bits, &x, sizeof bits);
        const int32_t magnitude = bits & 0x7FFFFFFF;
        /* all bits set where x is below -87 (or NaN), where x is NaN */
        const int32_t low = -(int32_t)(magnitude > (lowest_bits & 0x7FFFFFFF)), broken = -(int32_t)(magnitude > 0x7F800000);
        bits = (bits & ~low) | (lowest_bits & low);
        memcpy(&x, &bits, sizeof x);
        const float t = x * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: t's low bits hold x / ln 2, rounded */
        const float fx = t - 12582912.0f;
        memcpy(&k, &t, sizeof k);
        k -= 0x4B400000; /* x / ln 2 rounded: -126..0 */
        x = x - fx * 0.693359375f + fx * 2.12194440e-4f; /* x - fx ln 2, ln 2 in two parts */
        float y = 1.9875691500e-4f;
        y = y * x + 1.3981999507e-3f;
        y = y * x + 8.3334519073e-3f;
        y = y * x + 4.1665795894e-2f;
        y = y * x + 1.6666665459e-1f;
        y = y * x + 5.0000001201e-1f;
        y = y * x * x + x + 1.0f;
        bits = (k + 127) << 23; /* 2^k */
        float two;
        memcpy(&two, &bits, sizeof two);
        const float e = y * two;
        memcpy(&out, &e, sizeof out);
        out = (out & ~low) | (nan_bits & broken);
        memcpy(&s[j], &out, sizeof out);
    }
}

/* The query heads q (group of them, dim floats each) of one key-value head over its `keys` keys and values (dim
   floats apart): their outputs (out, dim floats apart). `scores`: group x (keys + LANES + dim) floats. Keys are read
   LANES at a time for every head, and values VALUE_RUN at a time, so each reaches the cache once per head group,
   not once per head (8 rows of 1,000 keys, 3 heads a group, Zen 3: 1.7 ms a layer -> 1.3, with sdpa's 2.6). */
#define VALUE_RUN 32
static inline __attribute__((always_inline)) void attend_heads(
    const float *q, int group, const float *k, const float *v, int keys, const uint8_t *allowed, float scale,
    float *scores, float *out, const int dim)
{
    const int chunks = dim / LANES;
    const size_t room = (size_t)keys + LANES;
    float *scaled = scores + room * group, best[MAX_GROUP], total[MAX_GROUP]; /* the heads' q * scale */
    for (int d = 0; d < group * dim; d++) scaled[d] = q[d] * scale;
    for (int h = 0; h < group; h++) best[h] = -INFINITY, total[h] = 0.0f;
    for (int j0 = 0; j0 < keys; j0 += LANES) {
        const int n = keys - j0 < LANES ? keys - j0 : LANES;
        for (int h = 0; h < group; h++) {
            float *s = scores + room * h;
            const float *qh = scaled + (size_t)h * dim;
#ifdef vstore
            vec acc[LANES];
            float sums[LANES];
            for (int jj = 0; jj < LANES; jj++) acc[jj] = vzero();
            if (n == LANES) { /* LANES keys' sums side by side: independent chains of multiply-adds */
                for (int c = 0; c < chunks; c++) {
                    const vec qc = vload(qh + c * LANES);
                    for (int jj = 0; jj < LANES; jj++) acc[jj] = vfma(qc, vload(k + (size_t)(j0 + jj) * dim + c * LANES), acc[jj]);
                }
            } else {
                for (int jj = 0; jj < n; jj++)
                    for (int c = 0; c < chunks; c++)
                        acc[jj] = vfma(vload(qh + c * LANES), vload(k + (size_t)(j0 + jj) * dim + c * LANES), acc[jj]);
            }
            vstore(sums, vsums(acc));
            for (int lane = 0; lane < LANES; lane++) { /* lane 4g + i holds acc[g + LANES / 4 * i] (vsums) */
                const int jj = lane / 4 + LANES / 4 * (lane % 4);
                if (jj < n) s[j0 + jj] = sums[lane];
            }
#else
            for (int jj = 0; jj < n; jj++) {
                vec acc = vzero();
                for (int c = 0; c < chunks; c++) acc = vfma(vload(qh + c * LANES), vload(k + (size_t)(j0 + jj) * dim + c * LANES), acc);
                s[j0 + jj] = vsum(acc);
            }
#endif
            for (int j = j0; j < j0 + n; j++) {
                if (allowed && !allowed[j]) s[j] = -INFINITY;
                else if (s[j] > best[h]) best[h] = s[j];
            }
        }
    }
    for (int h = 0; h < group; h++) { /* a head that sees no key at all gets zeros, as sdpa gives */
        float *s = scores + room * h;
        if (best[h] == -INFINITY)
            for (int j = 0; j < keys; j++) s[j] = 0.0f;
        else
            exp_shifted(s, keys, best[h]);
    }
    for (int h = 0; h < group; h++)
        for (int d = 0; d < dim; d++) out[(size_t)h * dim + d] = 0.0f;
    vec o[MAX_HEAD_DIM / LANES];
    for (int j0 = 0; j0 < keys; j0 += VALUE_RUN) {
        const int end = keys - j0 < VALUE_RUN ? keys : j0 + VALUE_RUN;
        for (int h = 0; h < group; h++) {
            const float *s = scores + room * h;
            float *oh = out + (size_t)h * dim;
            for (int c = 0; c < chunks; c++) o[c] = vload(oh + c * LANES);
            for (int j = j0; j < end; j++) {
                if (s[j] == 0.0f) continue; /* a masked key (or one whose weight underflows) adds nothing */
                total[h] += s[j];
                const vec p = vset(s[j]);
                for (int c = 0; c < chunks; c++) o[c] = vfma(p, vload(v + (size_t)j * dim + c * LANES), o[c]);
            }
            for (int c = 0; c < chunks; c++) {
                float lanes[LANES];
                memcpy(lanes, &o[c], sizeof lanes);
                memcpy(oh + c * LANES, lanes, sizeof lanes);
            }
        }
    }
    for (int h = 0; h < group; h++) {
        const float inv = total[h] == 0.0f ? 0.0f : 1.0f / total[h]; /* (no key at all: zeros; NaN stays NaN) */
        for (int d = 0; d < dim; d++) out[(size_t)h * dim + d] *= inv;
    }
}

/* Row r's query heads of key-value head g (heads / kv_heads of them, in order), for each of the head dims the
   compiler specializes (the accumulators' count fixed) and any other multiple of LANES. */
static __attribute__((noinline)) void attend_group(
    const float *q, int heads, int kv_heads, int dim, const float *k, const float *v, int keys,
    const uint8_t *allowed, float scale, float *out, int r, int g, float *scores)
{
    const int group = heads / kv_heads;
    const size_t at = ((size_t)r * heads + (size_t)g * group) * dim;
    switch (dim) {
    case 64: attend_heads(q + at, group, k, v, keys, allowed, scale, scores, out + at, 64); break;
    case 128: attend_heads(q + at, group, k, v, keys, allowed, scale, scores, out + at, 128); break;
    default: attend_heads(q + at, group, k, v, keys, allowed, scale, scores, out + at, dim); break;
    }
}

/* q: rows x heads x dim; k, v: row r's key-value head g at k + r * k_row + g * k_head (keys x dim each, rows
   dim floats apart), and v alike; allowed: rows x keys, 0 where a row has no token (a batch's padding), or
   NULL; out: rows x heads x dim. Heads a multiple of kv_heads (grouped-query attention), dim a multiple of
   LANES up to MAX_HEAD_DIM (else 1 is returned and nothing written; 2: no memory for the scores). Rows' heads split across `threads`. */
int attend(const float *q, int rows, int heads, int kv_heads, int dim, const float *k, const float *v,
           ptrdiff_t k_row, ptrdiff_t k_head, ptrdiff_t v_row, ptrdiff_t v_head, int keys, const uint8_t *allowed, float scale,
           float *out, int threads)
{
    (void)threads; /* (a build without OpenMP) */
    if (dim % LANES || dim > MAX_HEAD_DIM || kv_heads <= 0 || heads % kv_heads || heads / kv_heads > MAX_GROUP || keys <= 0)
        return 1;
    const int tasks = rows * kv_heads;
    const size_t room = ((size_t)keys + LANES + dim) * (size_t)(heads / kv_heads); /* each task's (attend_heads) */
    float *scores = malloc(sizeof(float) * room * (size_t)tasks);
    if (!scores) return 2;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int t = 0; t < tasks; t++) {
        const int r = t / kv_heads, g = t % kv_heads;
        attend_group(q, heads, kv_heads, dim, k + r * k_row + g * k_head, v + r * v_row + g * v_head, keys,
                     allowed ? allowed + (size_t)r * keys : NULL, scale, out, r, g, scores + room * (size_t)t);
    }
    free(scores);
    return 0;
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
