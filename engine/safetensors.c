/* safetensors.c — .safetensors reader (spec models.md §2.1): mmap, parse the JSON header with cJSON,
 * check every entry against the file before handing out pointers. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"

#define ST_MAX_HEADER 100000000u   /* the reference reader's MAX_HEADER_SIZE */

struct SafeTensors {
    char path[1024];
    uint8_t *map;
    size_t size;
    cJSON *header;       /* owns the tensor name strings */
    int n_tensors;
    StTensor *tensors;
};

static const struct { const char *name; int bytes; int ggml_type; } DTYPES[] = {
    {"F32", 4, GGML_F32}, {"F16", 2, GGML_F16}, {"BF16", 2, GGML_BF16}, {"F64", 8, -1},
    {"I64", 8, -1},       {"U64", 8, -1},       {"I32", 4, -1},         {"U32", 4, -1},
    {"I16", 2, -1},       {"U16", 2, -1},       {"I8", 1, -1},          {"U8", 1, -1},
    {"BOOL", 1, -1},      {"F8_E5M2", 1, -1},   {"F8_E4M3", 1, -1},     {"F8_E8M0", 1, -1},
};

/* A JSON number that is a non-negative integer (exact in a double up to 2^53). */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

static int parse_entry(SafeTensors *st, const cJSON *item, StTensor *t, const uint8_t *buffer, size_t buffer_size,
                       KvErr *err) {
    t->name = item->string;
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsObject(item) || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2)
        return kv_fail(err, "%s: header entry '%s' needs dtype, shape and data_offsets [begin, end]", st->path,
                       t->name);
    int elem_bytes = 0;
    t->dtype = dtype->valuestring;
    t->ggml_type = -1;
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (!strcmp(t->dtype, DTYPES[i].name)) elem_bytes = DTYPES[i].bytes, t->ggml_type = DTYPES[i].ggml_type;
    if (!elem_bytes) return kv_fail(err, "%s: tensor '%s' has unknown dtype '%s'", st->path, t->name, t->dtype);
    t->n_dims = cJSON_GetArraySize(shape);
    if (t->n_dims > ST_MAX_DIMS)
        return kv_fail(err, "%s: tensor '%s' has %d dimensions (at most %d)", st->path, t->name, t->n_dims,
                       ST_MAX_DIMS);
    uint64_t n_elems = 1;
    for (int i = 0; i < t->n_dims; i++) {
        if (json_u64(cJSON_GetArrayItem(shape, i), &t->shape[i]))
            return kv_fail(err, "%s: tensor '%s' has a shape entry that is not a non-negative integer", st->path,
                           t->name);
        if (t->shape[i] && n_elems > (UINT64_MAX / 8) / t->shape[i])
            return kv_fail(err, "%s: tensor '%s' has an impossibly large shape", st->path, t->name);
        n_elems *= t->shape[i];
    }
    uint64_t begin, end;
    if (json_u64(cJSON_GetArrayItem(offs, 0), &begin) || json_u64(cJSON_GetArrayItem(offs, 1), &end))
        return kv_fail(err, "%s: tensor '%s' data_offsets are not non-negative integers", st->path, t->name);
    if (begin > end || end > buffer_size)
        return kv_fail(err, "%s: tensor '%s' data_offsets [%llu, %llu] out of range (data buffer is %zu bytes)",
                       st->path, t->name, (unsigned long long)begin, (unsigned long long)end, buffer_size);
    if (end - begin != n_elems * (uint64_t)elem_bytes)
        return kv_fail(err, "%s: tensor '%s' spans %llu bytes but its shape and dtype %s need %llu", st->path,
                       t->name, (unsigned long long)(end - begin), t->dtype,
                       (unsigned long long)(n_elems * (uint64_t)elem_bytes));
    t->data = buffer + begin;
    t->n_bytes = (size_t)(end - begin);
    return 0;
}

static int parse(SafeTensors *st, KvErr *err) {
    uint64_t header_len;
    if (st->size < 8) return kv_fail(err, "%s: truncated: %zu bytes, no header length", st->path, st->size);
    memcpy(&header_len, st->map, 8);
    if (header_len > ST_MAX_HEADER)
        return kv_fail(err, "%s: header length %llu exceeds the %u-byte limit (not a safetensors file?)", st->path,
                       (unsigned long long)header_len, ST_MAX_HEADER);
    if (header_len > st->size - 8)
        return kv_fail(err, "%s: truncated: header of %llu bytes, file has %zu after the length", st->path,
                       (unsigned long long)header_len, st->size - 8);
    st->header = cJSON_ParseWithLength((const char *)st->map + 8, (size_t)header_len);
    if (!cJSON_IsObject(st->header))
        return kv_fail(err, "%s: header is not a valid JSON object", st->path);
    size_t data_start = 8 + (size_t)header_len, buffer_size = st->size - data_start;
    int n = cJSON_GetArraySize(st->header);
    st->tensors = kv_calloc((size_t)n, sizeof *st->tensors, err);
    if (!st->tensors) return kv_wrap(err, "%s", st->path);
    for (const cJSON *item = st->header->child; item; item = item->next) {
        if (!strcmp(item->string, "__metadata__")) continue;
        StTensor *t = &st->tensors[st->n_tensors];
        if (parse_entry(st, item, t, st->map + data_start, buffer_size, err)) return -1;
        st->n_tensors++;
    }
    return 0;
}

int st_open(SafeTensors **out, const char *path, KvErr *err) {
    *out = NULL;
    SafeTensors *st = kv_calloc(1, sizeof *st, err);
    if (!st) return kv_wrap(err, "%s", path);
    snprintf(st->path, sizeof st->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        free(st);
        return kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        free(st);
        return kv_fail(err, "%s: not a regular file", path);
    }
    st->size = (size_t)sb.st_size;
    if (st->size) {
        st->map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (st->map == MAP_FAILED) {
            close(fd);
            free(st);
            return kv_fail(err, "%s: cannot mmap: %s", path, strerror(errno));
        }
    }
    close(fd);
    if (parse(st, err)) {
        st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void st_close(SafeTensors *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->size);
    cJSON_Delete(st->header);
    free(st->tensors);
    free(st);
}

const char *st_path(const SafeTensors *st) { return st->path; }
int st_n_tensors(const SafeTensors *st) { return st->n_tensors; }

const StTensor *st_tensor(const SafeTensors *st, int index) {
    return index >= 0 && index < st->n_tensors ? &st->tensors[index] : NULL;
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}
