/* safetensors_writer.h: safetensors files written from tensors held in
 * memory, for tests that need checkpoints the fixtures do not have (edited
 * copies in test_checkpoint.c, new shapes in test_variants.c).  Header-only
 * because every tests/test_*.c is its own program; failures are cmocka
 * assertions, so cmocka.h comes first. */
#ifndef RL_TEST_SAFETENSORS_WRITER_H
#define RL_TEST_SAFETENSORS_WRITER_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/safetensors.h"

/* A tensor held in memory, for writing edited safetensors files. */
typedef struct WTensor {
    char name[128];
    char dtype[8];
    int ndim;
    int64_t shape[2];
    unsigned char *data;
    size_t nbytes;
} WTensor;

typedef struct WModel {
    WTensor t[256];
    int n;
} WModel;

static inline const char *dtype_tag(rlDtype d) {
    return d == RL_BF16 ? "BF16" : d == RL_F16 ? "F16" : d == RL_I32 ? "I32"
           : d == RL_F8_E4M3 ? "F8_E4M3" : "F32";
}

/* Appends every tensor of a safetensors file to m. */
static inline void read_tensors(const char *path, WModel *m) {
    rlSafetensors st;
    rlError err = {0};
    if (safetensors_open(&st, path, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < st.n_tensors; i++) {
        WTensor *w = &m->t[m->n++];
        const rlStTensor *t = &st.tensors[i];
        snprintf(w->name, sizeof(w->name), "%s", t->name);
        snprintf(w->dtype, sizeof(w->dtype), "%s", dtype_tag(t->dtype));
        w->ndim = t->ndim;
        memcpy(w->shape, t->shape, sizeof(w->shape));
        w->nbytes = t->nbytes;
        w->data = malloc(t->nbytes);
        memcpy(w->data, t->data, t->nbytes);
    }
    safetensors_close(&st);
}

static inline void free_tensors(WModel *m) {
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
    m->n = 0;
}

static inline WTensor *find_tensor(WModel *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, name) == 0) return &m->t[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Writes the 8-byte length, the header padded to 8 bytes, then data_len bytes of zeros. */
static inline void write_raw(const char *path, const char *header, size_t data_len) {
    size_t hlen = (strlen(header) + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 8; i++) fputc((int)(hlen >> (8 * i)) & 0xff, f);
    fputs(header, f);
    for (size_t i = strlen(header); i < hlen; i++) fputc(' ', f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

/* Writes tensors [from, to) of m as one safetensors file. */
static inline void write_tensors(const char *path, const WModel *m, int from, int to) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (int i = from; i < to; i++) {
        const WTensor *t = &m->t[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(h, t->name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", t->dtype,
                                                  "shape", shape, "data_offsets", (json_int_t)off,
                                                  (json_int_t)(off + t->nbytes)));
        off += t->nbytes;
    }
    char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    write_raw(path, text, 0);
    free(text);
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    for (int i = from; i < to; i++)
        assert_int_equal(fwrite(m->t[i].data, 1, m->t[i].nbytes, f), m->t[i].nbytes);
    assert_int_equal(fclose(f), 0);
}

/* Writes m into dir as n_shards files model-0000k-of-0000n.safetensors
 * (tensors split evenly, in order) and model.safetensors.index.json. */
static inline void write_shards(const char *dir, const WModel *m, int n_shards) {
    json_t *map = json_object();
    char path[2048];
    for (int k = 0; k < n_shards; k++) {
        int from = m->n * k / n_shards, to = m->n * (k + 1) / n_shards;
        char name[64];
        snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        write_tensors(path, m, from, to);
        for (int i = from; i < to; i++) json_object_set_new(map, m->t[i].name, json_string(name));
    }
    json_t *index = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)0,
                              "weight_map", map);
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    assert_int_equal(json_dump_file(index, path, JSON_INDENT(2)), 0);
    json_decref(index);
}

#endif
