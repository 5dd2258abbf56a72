/* jsonfile.c — read a file and parse it as JSON, one message for every failure. */
#include "jsonfile.h"

#include <stdlib.h>

cJSON *kv_parse_json(const char *text, size_t len, const char *path, KvErr *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root) return root;
    int line = 1;
    for (const char *p = text; end && p < end && p < text + len; p++) line += *p == '\n';
    kv_fail(err, "%s: not valid JSON (line %d)", path, line);
    return NULL;
}

cJSON *kv_read_json(const char *path, KvErr *err) {
    size_t len;
    char *text = kv_read_file(path, &len, err);
    if (!text) return NULL;
    cJSON *root = kv_parse_json(text, len, path, err);
    free(text);
    return root;
}
