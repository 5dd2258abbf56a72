/* reference.h — a plain reference forward of the decoder (reference.c): the oracle the CPU backend's kernel
 * table is held to (tests/test_cpu_table.c). */
#ifndef KVBENCH_CPU_REFERENCE_H
#define KVBENCH_CPU_REFERENCE_H

#include "../err.h"
#include "../model.h"

/* logits[V] of the last of tokens[0..n) after running all n through m from an empty context: one sequence,
 * every position recomputed, f32 weights read from m's arena (a Model from model_load). Slow (no cache, no
 * threads, no SIMD) and readable: each step is the formula it implements. */
int cpu_reference_forward(const Model *m, const int *tokens, int n, float *logits, KvErr *err);

#endif
