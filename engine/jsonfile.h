/* jsonfile.h — a JSON file (configs, assets, tokenizers, model configs, DuoAttention patterns) read and parsed
 * with one message for every way it can fail, so that every reader says the same thing. */
#ifndef KVBENCH_JSONFILE_H
#define KVBENCH_JSONFILE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "err.h"

/* Parses len bytes of text read from `path` (which only names it in the message); NULL with err
 * "PATH: not valid JSON (line N)", N the line where parsing stopped (a truncated file: its last). The caller
 * frees the result with cJSON_Delete. */
cJSON *kv_parse_json(const char *text, size_t len, const char *path, KvErr *err);

/* kv_read_file then kv_parse_json: NULL with err naming the file and the problem. */
cJSON *kv_read_json(const char *path, KvErr *err);

#endif
