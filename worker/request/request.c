/* request.c: one job's request map -> rlRequest, validated as
 * worker/redis/PROTOCOL.md says.
 *
 * Shared by `redlm generate` (JSON lines) and the Redis worker (JSON or
 * msgpack entries, both decoded to json_t first), so validation and its
 * messages are identical offline and online.  Every message names the field
 * and says what was expected, since the producer reading it cannot see our
 * source. */
#include "worker/request/request.h"
#include "worker/lib/utf8.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void request_init(rlRequest *r) {
    memset(r, 0, sizeof(*r));
    r->max_tokens = 256;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->n = 1;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
    r->stream = 1;
    r->attempt = 1;
}

void request_free(rlRequest *r) {
    free(r->id);
    free(r->prompt);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_token_ids);
    free(r->reply_to);
    memset(r, 0, sizeof(*r));
}

static const char *const INVALID = "invalid_request";

/* A copy of string value v of field `name` (element `idx` of it when >= 0). */
static int get_string(const json_t *v, const char *name, int idx, int allow_empty, char **out,
                      const char **code, rlError *err) {
    char where[96];
    if (idx >= 0) snprintf(where, sizeof(where), "%s[%d]", name, idx);
    else snprintf(where, sizeof(where), "%s", name);
    if (!json_is_string(v)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "invalid_request: field '%s' must be a string", where);
    }
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (!utf8_valid(s, len, NULL)) {
        *code = "invalid_utf8";
        return rl_error(err, RL_EINPUT, "invalid_utf8: field '%s' is not valid UTF-8", where);
    }
    if (strlen(s) != len) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "invalid_request: field '%s' contains a NUL character",
                        where);
    }
    if (!allow_empty && len == 0) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "invalid_request: field '%s' must not be empty", where);
    }
    if (!(*out = strdup(s))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field '%s'", where);
    }
    return 0;
}

static int get_int(const json_t *v, const char *name, long long lo, long long hi, long long *out,
                   const char **code, rlError *err) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT,
                        "invalid_request: field '%s' must be an integer in [%lld, %lld]", name,
                        lo, hi);
    }
    *out = json_integer_value(v);
    return 0;
}

/* A number in a range; lo_open/hi_open make that end exclusive. */
static int get_float(const json_t *v, const char *name, double lo, int lo_open, double hi,
                     int hi_open, float *out, const char **code, rlError *err) {
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "invalid_request: field '%s' must be a number in %c%g, %g%c",
                        name, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    }
    *out = (float)x;
    return 0;
}

static int get_bool(const json_t *v, const char *name, int *out, const char **code, rlError *err) {
    if (!json_is_boolean(v)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "invalid_request: field '%s' must be true or false", name);
    }
    *out = json_is_true(v);
    return 0;
}

static int get_array(const json_t *v, const char *name, int allow_empty, const char **code,
                     rlError *err) {
    if (!json_is_array(v) || (!allow_empty && json_array_size(v) == 0) ||
        json_array_size(v) > INT_MAX / 8) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "invalid_request: field '%s' must be a%s array", name,
                        allow_empty ? "n" : " non-empty");
    }
    return 0;
}

static int get_ids(const json_t *v, const char *name, int allow_empty, int32_t **out, int *n,
                   const char **code, rlError *err) {
    if (get_array(v, name, allow_empty, code, err)) return -1;
    size_t len = json_array_size(v);
    *out = malloc((len ? len : 1) * sizeof(int32_t));
    if (!*out) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field '%s'", name);
    }
    for (size_t i = 0; i < len; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX) {
            *code = INVALID;
            return rl_error(err, RL_EINPUT,
                            "invalid_request: field '%s' must hold token ids (integers >= 0); "
                            "element %zu is not one", name, i);
        }
        (*out)[i] = (int32_t)json_integer_value(e);
        (*n)++;
    }
    return 0;
}

static int get_messages(rlRequest *r, const json_t *v, const char **code, rlError *err) {
    if (get_array(v, "messages", 0, code, err)) return -1;
    size_t len = json_array_size(v);
    if (!(r->messages = calloc(len, sizeof(rlMessage)))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field 'messages'");
    }
    for (size_t i = 0; i < len; i++) {
        const json_t *m = json_array_get(v, i);
        rlMessage *msg = &r->messages[r->n_messages++];
        const char *key;
        const json_t *val;
        if (!json_is_object(m)) goto bad;
        json_object_foreach((json_t *)m, key, val) {
            if (strcmp(key, "role") && strcmp(key, "content")) {
                *code = INVALID;
                return rl_error(err, RL_EINPUT,
                                "invalid_request: messages[%zu] has unknown field '%s' "
                                "(a message is {\"role\", \"content\"})", i, key);
            }
        }
        if (!json_object_get(m, "role") || !json_object_get(m, "content")) goto bad;
        if (get_string(json_object_get(m, "role"), "messages.role", (int)i, 0, &msg->role, code, err) ||
            get_string(json_object_get(m, "content"), "messages.content", (int)i, 1, &msg->content,
                       code, err))
            return -1;
        continue;
    bad:
        *code = INVALID;
        return rl_error(err, RL_EINPUT,
                        "invalid_request: messages[%zu] must be an object with string fields "
                        "'role' and 'content'", i);
    }
    return 0;
}

static int get_stop(rlRequest *r, const json_t *v, const char **code, rlError *err) {
    if (get_array(v, "stop", 1, code, err)) return -1;
    size_t len = json_array_size(v);
    if (len && !(r->stop = calloc(len, sizeof(char *)))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field 'stop'");
    }
    for (size_t i = 0; i < len; i++) {
        if (get_string(json_array_get(v, i), "stop", (int)i, 0, &r->stop[i], code, err)) return -1;
        r->n_stop++;
    }
    return 0;
}

/* Optional fields whose absence means "none" accept null as well. */
static int field(rlRequest *r, const char *key, const json_t *v, const char **code, rlError *err) {
    long long x;
    if (!strcmp(key, "id")) {
        if (get_string(v, "id", -1, 0, &r->id, code, err)) return -1;
        if (strlen(r->id) > RL_ID_MAX) {
            *code = INVALID;
            return rl_error(err, RL_EINPUT, "invalid_request: field 'id' is %zu bytes; at most %d",
                            strlen(r->id), RL_ID_MAX);
        }
        return 0;
    }
    if (!strcmp(key, "prompt")) return get_string(v, "prompt", -1, 1, &r->prompt, code, err);
    if (!strcmp(key, "messages")) return get_messages(r, v, code, err);
    if (!strcmp(key, "prompt_ids"))
        return get_ids(v, "prompt_ids", 0, &r->prompt_ids, &r->n_prompt_ids, code, err);
    if (!strcmp(key, "max_tokens")) {
        if (get_int(v, key, 0, INT_MAX / 2, &x, code, err)) return -1;
        r->max_tokens = (int)x;
        return 0;
    }
    if (!strcmp(key, "temperature")) return get_float(v, key, 0, 0, INFINITY, 0, &r->temperature, code, err);
    if (!strcmp(key, "top_p")) return get_float(v, key, 0, 1, 1, 0, &r->top_p, code, err);
    if (!strcmp(key, "min_p")) return get_float(v, key, 0, 0, 1, 1, &r->min_p, code, err);
    if (!strcmp(key, "top_k")) {
        if (get_int(v, key, 0, INT_MAX, &x, code, err)) return -1;
        r->top_k = (int)x;
        return 0;
    }
    if (!strcmp(key, "seed")) {
        if (json_is_null(v)) return 0;
        if (get_int(v, key, LLONG_MIN, LLONG_MAX, &x, code, err)) return -1;
        r->has_seed = 1;
        r->seed = (uint64_t)x;
        return 0;
    }
    if (!strcmp(key, "n")) {
        if (get_int(v, key, 1, 256, &x, code, err)) return -1;
        r->n = (int)x;
        return 0;
    }
    if (!strcmp(key, "stop")) return get_stop(r, v, code, err);
    if (!strcmp(key, "stop_token_ids"))
        return get_ids(v, key, 1, &r->stop_token_ids, &r->n_stop_token_ids, code, err);
    if (!strcmp(key, "ignore_eos")) return get_bool(v, key, &r->ignore_eos, code, err);
    if (!strcmp(key, "logprobs") || !strcmp(key, "prompt_logprobs")) {
        int *out = key[0] == 'l' ? &r->logprobs : &r->prompt_logprobs;
        if (json_is_null(v)) return 0;
        if (get_int(v, key, 0, 20, &x, code, err)) return -1;
        *out = (int)x;
        return 0;
    }
    if (!strcmp(key, "stream")) return get_bool(v, key, &r->stream, code, err);
    if (!strcmp(key, "reply_to")) {
        if (json_is_null(v)) return 0;
        return get_string(v, key, -1, 0, &r->reply_to, code, err);
    }
    if (!strcmp(key, "priority")) {
        if (get_int(v, key, INT_MIN, INT_MAX, &x, code, err)) return -1;
        r->priority = (int)x;
        return 0;
    }
    if (!strcmp(key, "deadline_ms")) {
        if (json_is_null(v)) return 0;
        if (get_int(v, key, 0, LLONG_MAX, &x, code, err)) return -1;
        r->deadline_ms = x;
        return 0;
    }
    *code = INVALID;
    return rl_error(err, RL_EINPUT,
                    "invalid_request: unknown field '%s' (the request fields are listed in "
                    "worker/redis/PROTOCOL.md)",
                    key);
}

int request_parse(rlRequest *r, const json_t *obj, const char **code, rlError *err) {
    *code = INVALID;
    if (!json_is_object(obj))
        return rl_error(err, RL_EINPUT, "invalid_request: a request must be a JSON object");
    /* The id first, so every later error can be answered under it. */
    const json_t *id = json_object_get(obj, "id");
    if (!id) return rl_error(err, RL_EINPUT, "invalid_request: field 'id' is required");
    if (field(r, "id", id, code, err)) return -1;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        if (!strcmp(key, "id")) continue;
        if (field(r, key, v, code, err)) return -1;
    }
    int forms = (r->prompt != NULL) + (r->messages != NULL) + (r->prompt_ids != NULL);
    if (forms != 1) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT,
                        "invalid_request: give exactly one of 'prompt', 'messages', 'prompt_ids' "
                        "(got %d)", forms);
    }
    return 0;
}
