/* full.c — the full cache: keeps every entry, the reference every method is measured against. */
#include "policy_internal.h"

POLICY_DESCRIPTOR(FULL) = {
    .name = "full",
    .press_name = "fullkv",
    .source = "no compression (the reference's fullkv)",
    .role = POLICY_REFERENCE,
    .allocation = ALLOC_ALL,
    .colour = "#000000",
};
