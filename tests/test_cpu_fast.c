/* test_cpu_fast.c — the opt-in FAST products (engine/cpu/: portable.c, avx2.c, vnni.c; decode fast) and the fast decode:
 *  - every kernel this CPU runs (AVX2, VNNI, AMX; a kernel it lacks is skipped with a printed line) gives the
 *    portable C's outputs bit for bit (so the same exact int32 block dots and the same f32 chain), on random
 *    4-bit and int8 weights with edge blocks (codes all 0 / all 15, int8 -128 / 127, all-zero activation
 *    blocks, a block of +-max, one huge value among small ones), K = 32, 96, 576, N = 16, 37, 64 (tails past
 *    the 16-output vectors), M = 1..17, with bias and accumulation, made in 1..3 shares as threads make them;
 *    the same on a source's blocks of each ggml type the fast products take (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
 *    Q5_K, Q6_K: random blocks, every 7th all 0xff, every 11th zero; K of one and two super-blocks, N = 16 and 37,
 *    M = 1, 3, 16, 17), where the vector kernels include the row-by-row single-row ones of Q4_K and Q6_K;
 *  - each type's block decode (cpu_fast_block) rebuilds gguf.c's dequantised weights exactly, and the float64
 *    product below takes the dequantiser's weights, not the decode's;
 *  - row r of an M-row call equals the 1-row call on that row, bit for bit;
 *  - the portable C against this file's own float64 evaluation of the stated arithmetic (quantise, integer
 *    dots, then the per-block terms): relative 1e-5 (f32 rounding over K/32 steps), and against the float64
 *    product of the unquantised activations: relative 2e-2 (int8 activations);
 *  - SmolLM2 (models/, skipped when absent) under KVBENCH_DECODE=fast: B = 1, 2, 3, 16, 17 sequences with different
 *    cache lengths decoding together give each sequence's single fast decode bit for bit, for each kernel,
 *    and every kernel gives the same logits; the same on Qwen2.5-Coder-0.5B (Q5_0, Q8_0, Q4_K and Q6_K
 *    matrices; B = 1, 3, 17) for the portable C and the best kernel this CPU runs;
 *  - KVBENCH_FAST_KERNEL rejects an unknown name. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/cpu/ops.h"
#include "../engine/gguf.h"
#include "../engine/kvcache.h"
#include "test.h"

#define GGUF_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define QWEN_PATH "models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf" /* Q5_0, Q8_0, Q4_K and Q6_K matrices */
enum { MAXK = 576, MAXN = 64, MAXM = 17 };

static unsigned state = 11;
static unsigned next(void) { return (state = state * 1664525u + 1013904223u) >> 8; }
static float uniform(void) { return (float)next() / 16777216.0f; }

static void make_q4(CpuQ4Block *w, int N, int K) {
    for (int i = 0; i < N * K / 32; i++) {
        w[i].scale = (uint16_t)(0x1000 + next() % 0x1000); /* positive normal f16, about 2^-11 .. 2^-7 */
        w[i].offset = (uint16_t)(0x9000 + next() % 0x1800);
        for (int j = 0; j < 16; j++) w[i].codes[j] = (uint8_t)(next() & 0xff);
        if (i % 7 == 3) memset(w[i].codes, 0xff, 16); /* every code 15 */
        if (i % 11 == 5) memset(w[i].codes, 0, 16);
    }
}

static void make_q8(CpuPacked *p, int N, int K) {
    for (int i = 0; i < N * K; i++) p->q[i] = (int8_t)(next() & 0xff);
    for (int i = 0; i < N * K / 32; i++) {
        p->scale[i] = 0.001f + 0.01f * uniform();
        p->offset[i] = i % 3 ? 0.0f : 0.02f * uniform() - 0.01f;
        if (i % 5 == 2) memset(p->q + (size_t)i * 32, 0x80, 32); /* every code -128 */
        if (i % 5 == 4) memset(p->q + (size_t)i * 32, 0x7f, 32);
    }
}

static void make_x(float *x, int M, int K) {
    for (int i = 0; i < M * K; i++) x[i] = 4 * uniform() - 2;
    for (int m = 0; m < M; m++)
        for (int b = 0; b < K / 32; b++) {
            float *v = x + (size_t)m * K + b * 32;
            switch ((m + b) % 6) {
            case 1: memset(v, 0, sizeof(float) * 32); break;                   /* all zero */
            case 2: for (int i = 0; i < 32; i++) v[i] = i % 2 ? 3.5f : -3.5f; break; /* every value +-max */
            case 3: v[5] = 1e6f; break;                                         /* one huge value */
            case 4: memset(v, 0, sizeof(float) * 32), v[31] = -0.25f; break;    /* one value */
            default: break;
            }
        }
}

/* The stated arithmetic in float64 from this file's own quantisation (weights given as f32 code, scale, offset). */
static double fast_reference(const float *x, int K, const float *code, const float *scale, const float *offset) {
    double total = 0;
    for (int b = 0; b < K / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        double d = amax / 127.0f;
        long dot = 0, sum = 0;
        for (int i = 0; i < 32; i++) {
            long q = amax > 0 ? lrintf(x[b * 32 + i] * (127.0f / amax)) : 0;
            dot += q * (long)code[b * 32 + i];
            sum += q;
        }
        total += (double)dot * scale[b] * d + (double)offset[b] * (d * (double)sum);
    }
    return total;
}

/* The weights of one product: 4-bit blocks (fmt 0), int8 codes (1) or a source's blocks (2, of blocks.type). */
typedef struct {
    int fmt;
    const CpuQ4Block *q4;
    const CpuPacked *q8;
    const CpuBlocks *blocks;
} Weights;

static const char *fmt_name(const Weights *wt) {
    return wt->fmt == 0 ? "q4" : wt->fmt == 1 ? "q8" : ggml_type_traits(wt->blocks->type)->name;
}

/* Random blocks of a ggml type: random bytes, the f16 scales set to small normal values (a min, where the type
 * has one, negative), every 7th block's other bytes all 0xff (the largest codes, a Q6_K scale of -1), every
 * 11th all zero. */
static void make_blocks(CpuBlocks *bl, uint8_t *data, int type, int N, int K) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    size_t n_blocks = (size_t)N * K / t->block;
    int d_at = type == GGML_Q6_K ? 208 : 0, m_at = type == GGML_Q4_1 || type == GGML_Q5_1 ? 2 : -1;
    int dmin_at = type == GGML_Q4_K || type == GGML_Q5_K ? 2 : -1;
    for (size_t i = 0; i < n_blocks; i++) {
        uint8_t *blk = data + i * t->bytes;
        for (uint32_t j = 0; j < t->bytes; j++) blk[j] = (uint8_t)(i % 7 == 3 ? 0xff : i % 11 == 5 ? 0 : next() & 0xff);
        uint16_t d = (uint16_t)(0x1000 + next() % 0x1000), m = (uint16_t)(0x9000 + next() % 0x1800);
        memcpy(blk + d_at, &d, 2);
        if (m_at >= 0) memcpy(blk + m_at, &m, 2);
        if (dmin_at >= 0) memcpy(blk + dmin_at, &d, 2);
    }
    *bl = (CpuBlocks){data, type, (size_t)K / t->block * t->bytes, (size_t)K / t->block};
}

static void weights_row(const Weights *wt, int n, int K, float *code, float *scale, float *offset, float *w) {
    if (wt->fmt == 2) {
        const uint8_t *row = wt->blocks->data + (size_t)n * wt->blocks->row_bytes;
        ggml_type_traits(wt->blocks->type)->dequant(row, w, wt->blocks->row_blocks); /* independent of the decode */
        for (int b = 0; b < K / 32; b++) {
            CpuFastBlock fb;
            cpu_fast_block(wt->blocks->type, row, b, &fb);
            scale[b] = fb.w;
            offset[b] = fb.o;
            for (int i = 0; i < 32; i++) code[b * 32 + i] = (float)(fb.code[i] * fb.sub[i / 16]);
        }
        return;
    }
    const CpuQ4Block *q4 = wt->q4;
    const CpuPacked *q8 = wt->q8;
    for (int b = 0; b < K / 32; b++) {
        if (wt->fmt == 0) {
            const CpuQ4Block *blk = q4 + (size_t)n * (K / 32) + b;
            scale[b] = kv_f16_to_f32(blk->scale);
            offset[b] = kv_f16_to_f32(blk->offset);
            for (int i = 0; i < 16; i++) code[b * 32 + i] = blk->codes[i] & 15, code[b * 32 + i + 16] = blk->codes[i] >> 4;
        } else {
            scale[b] = q8->scale[(size_t)n * (K / 32) + b];
            offset[b] = q8->offset[(size_t)n * (K / 32) + b];
            for (int i = 0; i < 32; i++) code[b * 32 + i] = q8->q[(size_t)n * K + b * 32 + i];
        }
        for (int i = 0; i < 32; i++) w[b * 32 + i] = code[b * 32 + i] * scale[b] + offset[b];
    }
}

/* The product in `parts` shares made one after another (what the threads of a decode step each make), so
 * the split is checked without thousands of parallel regions. */
static void run(CpuFastKernel kernel, const Weights *wt, float *y, const float *x, const float *bias, int M, int N,
                int K, int accumulate, int parts, float *tile) {
    CpuKernels kt; /* the table's entries of that kernel (for every number of rows) */
    KvErr ignored;
    cpu_kernels_init(&kt, NULL, cpu_fast_kernel_name(kernel), &ignored);
    CpuQ4Job job = {y, wt->q4, bias, N};
    for (int p = 0; p < parts; p++) {
        if (wt->fmt == 0) cpu_matmul_q4_fast_part(&kt.fast_many, &job, 1, x, M, K, accumulate, tile, p, parts);
        else if (wt->fmt == 1) cpu_matmul_q8_fast_part(&kt.fast_many, y, x, wt->q8, bias, M, N, K, accumulate, tile, p, parts);
        else cpu_matmul_blocks_fast_part(&kt.fast_many, y, x, wt->blocks, bias, M, N, K, accumulate, tile, p, parts);
    }
}

/* Each type's decode gives the dequantiser's weights exactly: fl(fl(fl(w * sub) * code) + o) (equal as values:
 * a zero may read +0 for -0). */
static void check_block_decode(TestCounts *tc) {
    static uint8_t data[MAXN * MAXK * 2];
    static float want[MAXK];
    for (int type = 0; type < CPU_GGML_TYPES; type++) {
        if (!cpu_fast_block_type(type)) continue;
        CpuBlocks bl;
        int K = 512, N = 8, wrong = 0;
        make_blocks(&bl, data, type, N, K);
        for (int n = 0; n < N; n++) {
            const uint8_t *row = data + (size_t)n * bl.row_bytes;
            ggml_type_traits(type)->dequant(row, want, bl.row_blocks);
            for (int b = 0; b < K / 32; b++) {
                CpuFastBlock fb;
                cpu_fast_block(type, row, b, &fb);
                for (int i = 0; i < 32; i++) {
                    volatile float scaled = fb.w * (float)fb.sub[i / 16], product = scaled * (float)fb.code[i];
                    wrong += (float)(product + fb.o) != want[b * 32 + i];
                }
            }
        }
        CHECK(tc, wrong == 0, "%s: the fast decode of %d blocks rebuilds the dequantiser's weights (%d differ)",
              ggml_type_traits(type)->name, N * K / 32, wrong);
    }
    static const int refused[] = {GGML_F32, GGML_F16, GGML_Q2_K, GGML_Q3_K, GGML_IQ4_NL, GGML_IQ4_XS, GGML_BF16};
    int taken = 0;
    for (int i = 0; i < (int)(sizeof refused / sizeof *refused); i++) taken += cpu_fast_block_type(refused[i]);
    CHECK(tc, taken == 0, "f32, f16, bf16, Q2_K, Q3_K and the IQ4 types are not taken by the fast products");
}

static void check_products(TestCounts *tc) {
    static CpuQ4Block q4[MAXN * MAXK / 32];
    static int8_t codes[MAXN * MAXK];
    static float scales[MAXN * MAXK / 32], offsets[MAXN * MAXK / 32];
    CpuPacked q8 = {codes, scales, offsets};
    static float x[MAXM * MAXK], y0[MAXM * MAXN], want[MAXM * MAXN], got[MAXM * MAXN], one[MAXN], bias[MAXN];
    static float code[MAXK], sc[MAXK / 32], off[MAXK / 32], w[MAXK];
    static uint8_t block_data[MAXN * MAXK * 2];
    CpuBlocks blocks;
    float *tile = aligned_alloc(64, sizeof(float) * CPU_Q4_TILE_FLOATS(MAXK));
    const int Ks[] = {32, 96, 576}, Ks_256[] = {256, 512}, Ns[] = {16, 37, 64};
    /* the formats: 4-bit blocks, int8 codes, then a source's blocks of each type the fast products take */
    const int types[] = {-1, -1, GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_Q8_0, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K};
    int usable[4];
    for (int k = 0; k < 4; k++) {
        usable[k] = cpu_fast_kernel_usable((CpuFastKernel)k);
        if (!usable[k])
            SKIP(tc, "the %s kernel: this CPU (or its kernel) does not run it", cpu_fast_kernel_name((CpuFastKernel)k));
    }
    for (int i = 0; i < MAXN; i++) bias[i] = uniform() - 0.5f;
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 3; ni++)
            for (int f = 0; f < (int)(sizeof types / sizeof *types); f++) {
                int fmt = f < 2 ? f : 2, type = types[f];
                /* a source's blocks: two K (a K-quant's one and two super-blocks), N = 16 and 37, M = 1, 3, 16, 17 */
                if (fmt == 2 && (ki == 2 || ni == 2)) continue;
                int K = type >= GGML_Q2_K ? Ks_256[ki] : Ks[ki], N = Ns[ni];
                make_q4(q4, N, K);
                make_q8(&q8, N, K);
                if (fmt == 2) make_blocks(&blocks, block_data, type, N, K);
                Weights wt = {fmt, q4, &q8, &blocks};
                make_x(x, MAXM, K);
                for (int i = 0; i < MAXM * N; i++) y0[i] = uniform() - 0.5f;
                /* the portable C against the float64 evaluations */
                run(CPU_FAST_SCALAR, &wt, want, x, NULL, MAXM, N, K, 0, 1, tile);
                double worst_q = 0, worst_f = 0, scale_q = 0, scale_f = 0;
                for (int n = 0; n < N; n++) {
                    weights_row(&wt, n, K, code, sc, off, w);
                    for (int m = 0; m < MAXM; m++) {
                        double r = fast_reference(x + (size_t)m * K, K, code, sc, off), f = 0;
                        for (int i = 0; i < K; i++) f += (double)x[(size_t)m * K + i] * w[i];
                        worst_q = fmax(worst_q, fabs(want[m * N + n] - r));
                        worst_f = fmax(worst_f, fabs(want[m * N + n] - f));
                        scale_q = fmax(scale_q, fabs(r));
                        scale_f = fmax(scale_f, fabs(f));
                    }
                }
                CHECK(tc, worst_q <= 1e-5 * scale_q, "%s K=%d N=%d: portable C vs float64 of the same arithmetic: %.3g",
                      fmt_name(&wt), K, N, worst_q / scale_q);
                CHECK(tc, worst_f <= 2e-2 * scale_f, "%s K=%d N=%d: portable C vs the float64 product: %.3g",
                      fmt_name(&wt), K, N, worst_f / scale_f);
                for (int k = 0; k < 4; k++) {
                    if (!usable[k]) continue;
                    const char *name = cpu_fast_kernel_name((CpuFastKernel)k);
                    for (int M = 1; M <= MAXM; M++) {
                        if (fmt == 2 && M != 1 && M != 3 && M != 16 && M != 17) continue;
                        for (int variant = 0; variant < 3; variant++) {
                            const float *b = variant ? bias : NULL;
                            int accumulate = variant == 2;
                            memcpy(want, y0, sizeof(float) * M * N);
                            memcpy(got, y0, sizeof(float) * M * N);
                            run(CPU_FAST_SCALAR, &wt, want, x, b, M, N, K, accumulate, 1, tile);
                            run((CpuFastKernel)k, &wt, got, x, b, M, N, K, accumulate, 1 + M % 3, tile);
                            CHECK(tc, !memcmp(want, got, sizeof(float) * M * N),
                                  "%s %s K=%d N=%d M=%d variant %d: equals the portable C bit for bit", name,
                                  fmt_name(&wt), K, N, M, variant);
                            int same = 1;
                            for (int m = 0; m < M; m++) {
                                memcpy(one, y0 + m * N, sizeof(float) * N);
                                run((CpuFastKernel)k, &wt, one, x + (size_t)m * K, b, 1, N, K, accumulate, 1, tile);
                                same &= !memcmp(one, got + m * N, sizeof(float) * N);
                            }
                            CHECK(tc, same, "%s %s K=%d N=%d M=%d variant %d: rows equal 1-row calls bit for bit", name,
                                  fmt_name(&wt), K, N, M, variant);
                        }
                    }
                }
            }
    free(tile);
}

/* B sequences with caches of different lengths, 3 decode steps together, against each one's own fast decode;
 * returns the batch's last logits (B x V) for comparing kernels. */
static float *check_batch(TestCounts *tc, Backend *be, int B, const char *kernel) {
    int V = be->model->cfg.vocab_size;
    KvErr err = {{0}};
    KvCache *bc[MAXM], *sc;
    int ids[64], step_tok[3][MAXM];
    for (int i = 0; i < 64; i++) ids[i] = (int)(next() % (unsigned)V);
    float *batch = malloc(sizeof(float) * (size_t)B * V), *solo = malloc(sizeof(float) * V);
    for (int b = 0; b < B; b++) {
        CHECK(tc, be->cache_new(be, &bc[b], 40, &err) == 0 && be->forward(be, &bc[b], 1, ids + b, 1 + b, NULL,
                                                                      NULL, NULL, &err) == 0, "%s", err.msg);
    }
    for (int s = 0; s < 3; s++) {
        for (int b = 0; b < B; b++) step_tok[s][b] = (int)(next() % (unsigned)V);
        CHECK(tc, be->forward(be, bc, B, step_tok[s], 1, batch, NULL, NULL, &err) == 0, "%s", err.msg);
    }
    int same = 1;
    for (int b = 0; b < B; b++) {
        int rc = be->cache_new(be, &sc, 40, &err) || be->forward(be, &sc, 1, ids + b, 1 + b, NULL, NULL, NULL, &err);
        for (int s = 0; !rc && s < 3; s++) rc = be->forward(be, &sc, 1, &step_tok[s][b], 1, solo, NULL, NULL, &err);
        CHECK(tc, rc == 0, "%s", err.msg);
        same &= !memcmp(solo, batch + (size_t)b * V, sizeof(float) * V);
        be->cache_free(be, sc);
        be->cache_free(be, bc[b]);
    }
    CHECK(tc, same, "%s, %s kernel, B=%d (caches of 1..%d tokens): the batched fast decode equals B single fast decodes "
          "bit for bit", be->model->source, kernel, B, B);
    free(solo);
    return batch;
}

/* The fast decode of the model at path, each kernel: batches of sizes[n_sizes]. With `blocks` (a model of a
 * source's blocks, whose load is slow), the portable C on B = 3 and the best kernel this CPU runs only. */
static void check_decode(TestCounts *tc, const char *path, const char *make, const int *sizes, int n_sizes, int blocks) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        SKIP(tc, "the decode checks of %s: not found (%s)", path, make);
        return;
    }
    fclose(f);
    KvErr err = {{0}};
    Model *m = NULL;
    CHECK(tc, backend_load_model(&m, "cpu", path, &err) == 0, "%s", err.msg);
    float *first = NULL;
    int best = CPU_FAST_SCALAR;
    for (int k = CPU_FAST_SCALAR; k <= CPU_FAST_AMX; k++) best = cpu_fast_kernel_usable((CpuFastKernel)k) ? k : best;
    for (int k = CPU_FAST_SCALAR; m && k <= CPU_FAST_AMX; k++) {
        const char *name = cpu_fast_kernel_name((CpuFastKernel)k);
        if (blocks && k != CPU_FAST_SCALAR && k != best) continue;
        if (!cpu_fast_kernel_usable((CpuFastKernel)k)) {
            SKIP(tc, "the %s kernel's decode: this CPU (or its kernel) does not run it", name);
            continue;
        }
        BackendOptions opt = {.decode = BACKEND_DECODE_FAST};
        snprintf(opt.fast_kernel, sizeof opt.fast_kernel, "%s", name);
        Backend *be = NULL;
        CHECK(tc, backend_open(&be, "cpu", m, &opt, &err) == 0, "%s", err.msg);
        if (!be) continue;
        for (int i = 0; i < n_sizes; i++) {
            /* the portable C only on one batch: it is slow at these models' sizes */
            if (k == CPU_FAST_SCALAR && sizes[i] != 3) continue;
            state = 5 + (unsigned)i; /* the same sequences for every kernel */
            float *logits = check_batch(tc, be, sizes[i], name);
            if (sizes[i] == 3 && !first) first = logits;
            else if (sizes[i] == 3) {
                CHECK(tc, !memcmp(first, logits, sizeof(float) * 3 * m->cfg.vocab_size),
                      "%s, %s kernel: the decode's logits equal the portable C's bit for bit", path, name);
                free(logits);
            } else {
                free(logits);
            }
        }
        backend_close(be);
    }
    if (!blocks) {
        BackendOptions tiles = {.decode = BACKEND_DECODE_FAST, .fast_kernel = "tiles"};
        Backend *be = NULL;
        CHECK(tc, m && backend_open(&be, "cpu", m, &tiles, &err) == -1 && strstr(err.msg, "unknown fast kernel"),
              "fast kernel 'tiles' is refused: %s", err.msg);
    }
    free(first);
    model_free(m);
}

int main(void) {
    TestCounts tc = {"test_cpu_fast", 0, 0, 0};
    check_block_decode(&tc);
    check_products(&tc);
    const int smollm2[] = {1, 2, 3, 16, 17}, qwen[] = {1, 3, 17};
    check_decode(&tc, GGUF_PATH, "make model", smollm2, 5, 0);
    check_decode(&tc, QWEN_PATH, "make model-qwen", qwen, 3, 1);
    return test_finish(&tc);
}
