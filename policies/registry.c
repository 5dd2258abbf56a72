/* registry.c — the list of policies: every descriptor (policies/<name>.c), in the order of help texts and
 * tables. A new policy is its own file plus its entry here (docs/policies.md, "Your own policy"). */
#include "policy_internal.h"

extern const PolicyRow POLICY_FULL, POLICY_STREAMINGLLM, POLICY_SNAPKV, POLICY_ADAKV, POLICY_CAKE,
    POLICY_CRITICALKV, POLICY_DEFENSIVEKV, POLICY_LAYER_DEFENSIVEKV, POLICY_DUOATTENTION, POLICY_KNORM,
    POLICY_KEYDIFF, POLICY_TOVA, POLICY_RANDOM;

static const PolicyRow *const REGISTRY[] = {
    &POLICY_FULL,        &POLICY_STREAMINGLLM, &POLICY_SNAPKV,
    &POLICY_ADAKV,       &POLICY_CAKE,         &POLICY_CRITICALKV,
    &POLICY_DEFENSIVEKV, &POLICY_LAYER_DEFENSIVEKV, &POLICY_DUOATTENTION,
    &POLICY_KNORM,       &POLICY_KEYDIFF,      &POLICY_TOVA,
    &POLICY_RANDOM,
};

const PolicyRow *const *policy_registry(int *n) {
    *n = (int)(sizeof REGISTRY / sizeof REGISTRY[0]);
    return REGISTRY;
}
