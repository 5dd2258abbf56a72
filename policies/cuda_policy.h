/* cuda_policy.h — a policy scored and selected on the device (policies/cuda_policy.cu): the same life
 * cycle as policy.h (begin, observe each layer in order, select any number of budgets, end) and the same
 * keep-sets, bit for bit, with the layer's window attention and value norms read in GPU memory and only the
 * keep-set's positions copied back. Every policy and aggregation of policy.h except the opt-in
 * ties_by_unclamped (refused at begin). Only compiled into a CUDA build (KVBENCH_CUDA). */
#ifndef KVBENCH_CUDA_POLICY_H
#define KVBENCH_CUDA_POLICY_H

#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CudaPolicy CudaPolicy;

/* The host's policy_begin checks, then the device's storage for N layers of scores. */
int cuda_policy_begin(CudaPolicy **out, const PolicyConfig *cfg, int n_layers, int n_kv_heads, int context_len,
                      KvErr *err);
/* obs->attn [H][w][L] and obs->value_norm [K][L] (when the policy needs it) are device pointers, complete when
 * this is called (it returns once the layer is scored; they may be overwritten after). */
int cuda_policy_observe(CudaPolicy *p, const Observation *obs, KvErr *err);
/* The same from host arrays (copied to the device first): for the checks that compare with the host. */
int cuda_policy_observe_host(CudaPolicy *p, const Observation *obs, KvErr *err);
/* policy_select's keep-set, from the device's scores. */
int cuda_policy_select(CudaPolicy *p, const Budget *budget, KeepSet *out, KvErr *err);
void cuda_policy_end(CudaPolicy *p);

#ifdef __cplusplus
}
#endif

#endif
