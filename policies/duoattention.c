/* duoattention.c — DuoAttention (Xiao et al. 2025): streaming heads from the model's trained head pattern, full
 * retrieval heads (duo.h). */
#include "policy_internal.h"

POLICY_DESCRIPTOR(DUOATTENTION) = {
    .name = "duoattention",
    .press_name = "duo_attention",
    .source = "Xiao et al. 2025; kvpress's DuoAttentionPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_DUO_PATTERN,
    .allocation = ALLOC_DUO,
    .colour = "#8c564b",
};
