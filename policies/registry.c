/* registry.c — the list of policies: every descriptor the build finds in policies/ (a line starting
 * POLICY_DESCRIPTOR(ID), policy_internal.h), in the order of their file names. The Makefile writes that list to
 * $(BUILD)/policies/policy_list.h as one POLICY_ENTRY(ID) per policy, so a new policy needs no entry here
 * (docs/policies.md, "Your own policy"). */
#include "policy_internal.h"

#define POLICY_ENTRY(id) extern const PolicyRow POLICY_##id;
#include "policy_list.h"
#undef POLICY_ENTRY

#define POLICY_ENTRY(id) &POLICY_##id,
static const PolicyRow *const REGISTRY[] = {
#include "policy_list.h"
};
#undef POLICY_ENTRY

const PolicyRow *const *policy_registry(int *n) {
    *n = (int)(sizeof REGISTRY / sizeof REGISTRY[0]);
    return REGISTRY;
}
