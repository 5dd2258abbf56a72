/* streamingllm.c — StreamingLLM (Xiao et al. 2024): attention sinks plus the most recent tokens, by position
 * only (spec policies.md §2.1). */
#include "policy_internal.h"

POLICY_DESCRIPTOR(STREAMINGLLM) = {
    .name = "streamingllm",
    .press_name = "streaming_llm",
    .source = "Xiao et al. 2024; the reference's StreamingLLMPress",
    .role = POLICY_BASELINE,
    .allocation = ALLOC_SINKS,
    .colour = "#7f7f7f",
    .n_sink = 4,
};
