/* request_impl.h: what request.c (the protocol's own fields) and
 * request_openai.c (the fields with OpenAI / vLLM names) share: the value
 * readers, so every field's type and range is refused in one wording. */
#ifndef RL_REQUEST_IMPL_H
#define RL_REQUEST_IMPL_H

#include <jansson.h>

#include "worker/request/request.h"

/* Each reads field `name` (element idx when >= 0) of value v or fails with
 * *code = "invalid_request" (or "invalid_utf8") and a message naming it. */
int request_get_string(const json_t *v, const char *name, int idx, int allow_empty, char **out,
                       const char **code, rlError *err);
int request_get_int(const json_t *v, const char *name, long long lo, long long hi, long long *out,
                    const char **code, rlError *err);
/* lo_open / hi_open make that end of the range exclusive. */
int request_get_float(const json_t *v, const char *name, double lo, int lo_open, double hi,
                      int hi_open, float *out, const char **code, rlError *err);
int request_get_bool(const json_t *v, const char *name, int *out, const char **code, rlError *err);
int request_get_array(const json_t *v, const char *name, int allow_empty, const char **code,
                      rlError *err);
int request_get_ids(const json_t *v, const char *name, int allow_empty, int32_t **out, int *n,
                    const char **code, rlError *err);

/* Reads field `key` of a request into r (each field's own reader). */
typedef int (*requestField)(rlRequest *r, const char *key, const json_t *v, const char **code,
                            rlError *err);

/* request_openai.c: one field of its table (0, or -1 when refused), or 1
 * when key is none of them. */
int request_openai_field(rlRequest *r, const char *key, const json_t *v, const char **code,
                         rlError *err);
/* The rules between its fields, once every field is read. */
int request_openai_finish(rlRequest *r, const json_t *obj, const char **code, rlError *err);
/* Its field names, at most n of them into names; returns how many. */
int request_openai_names(const char **names, int n);
void request_openai_free(rlRequest *r);
/* A message's content as one text: a string, or OpenAI's content parts
 * ([{"type": "text", "text": ...}], joined by newlines as vLLM does). */
int request_content_text(const json_t *v, size_t msg, char **out, const char **code,
                         rlError *err);

#endif
