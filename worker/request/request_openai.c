/* request_openai.c: the request fields producers bring from the OpenAI API
 * and vLLM's SamplingParams, with those APIs' names, types and meanings, in
 * one table beside the protocol's own fields (request.c).
 *
 * A job ported from either API runs unchanged: `logprobs: true` with
 * `top_logprobs`, `max_completion_tokens`, penalties, `logit_bias`,
 * `min_tokens`, `bad_words`, `model`, and `user` / `metadata` echoed back.
 * Ranges are the APIs' own (penalties -2..2, logit_bias -100..100,
 * repetition_penalty > 0), so a value they refuse is refused here too. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/lib/utf8.h"
#include "worker/request/request_impl.h"

static int openai_bad(const char **code, rlError *err, const char *what) {
    *code = "invalid_request";
    return rl_error(err, RL_EINPUT, "%s", what);
}

static int openai_oom(const char **code, rlError *err, const char *name) {
    *code = "internal";
    return rl_error(err, RL_EINTERNAL, "out of memory reading field '%s'", name);
}

/* logprobs: an int 0..20 (vLLM, completions: alternatives per token), or
 * true / false (chat: top_logprobs says how many); null: not asked. */
static int openai_logprobs(rlRequest *r, const char *key, const json_t *v, const char **code,
                           rlError *err) {
    long long x;
    if (json_is_false(v)) return 0;
    if (json_is_true(v)) {
        r->logprobs = 0;   /* top_logprobs, if given, in request_openai_finish */
        return 0;
    }
    if (!json_is_number(v))
        return openai_bad(code, err, "field 'logprobs' must be true, false, null or an integer "
                                     "in [0, 20]");
    if (request_get_int(v, key, 0, 20, &x, code, err)) return -1;
    r->logprobs = (int)x;
    return 0;
}

static int openai_top_logprobs(rlRequest *r, const char *key, const json_t *v,
                               const char **code, rlError *err) {
    long long x;
    (void)r;
    return request_get_int(v, key, 0, 20, &x, code, err);
}

static int openai_max_completion_tokens(rlRequest *r, const char *key, const json_t *v,
                                        const char **code, rlError *err) {
    long long x;
    if (request_get_int(v, key, 0, INT_MAX / 2, &x, code, err)) return -1;
    r->max_tokens = (int)x;
    r->given |= RL_GIVEN_MAX_TOKENS;
    return 0;
}

static int openai_penalty(rlRequest *r, const char *key, const json_t *v, const char **code,
                          rlError *err) {
    if (!strcmp(key, "repetition_penalty")) {
        r->given |= RL_GIVEN_REPETITION_PENALTY;
        return request_get_float(v, key, 0, 1, INFINITY, 1, &r->repetition_penalty, code, err);
    }
    float *out = key[0] == 'p' ? &r->presence_penalty : &r->frequency_penalty;
    return request_get_float(v, key, -2, 0, 2, 0, out, code, err);
}

static int bias_cmp(const void *a, const void *b) {
    const rlLogitBias *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* logit_bias: {"<token id>": bias in [-100, 100]}, as OpenAI spells it. */
static int openai_logit_bias(rlRequest *r, const char *key, const json_t *v, const char **code,
                             rlError *err) {
    (void)key;
    if (!json_is_object(v))
        return openai_bad(code, err, "field 'logit_bias' must be an object of token id -> bias "
                                     "in [-100, 100], e.g. {\"151643\": -100}");
    size_t n = json_object_size(v);
    if (n == 0) return 0;
    if (!(r->logit_bias = calloc(n, sizeof(rlLogitBias)))) return openai_oom(code, err, "logit_bias");
    const char *k;
    const json_t *b;
    json_object_foreach((json_t *)v, k, b) {
        char *end;
        long id = strtol(k, &end, 10);
        /* strtol also takes leading spaces and a sign: " -5" would pass a
         * check of k[0] alone and reach the sampler as token -5. */
        if (k[0] < '0' || k[0] > '9' || *end || id > INT32_MAX) {
            *code = "invalid_request";
            return rl_error(err, RL_EINPUT, "field 'logit_bias' key '%.40s' is "
                            "not a token id (a whole number >= 0 written as a string)", k);
        }
        double x = json_is_number(b) ? json_number_value(b) : NAN;
        if (!(x >= -100 && x <= 100)) {
            *code = "invalid_request";
            return rl_error(err, RL_EINPUT, "field 'logit_bias[\"%s\"]' must be "
                            "a number in [-100, 100]", k);
        }
        r->logit_bias[r->n_logit_bias++] = (rlLogitBias){(int32_t)id, (float)x};
    }
    qsort(r->logit_bias, (size_t)r->n_logit_bias, sizeof(rlLogitBias), bias_cmp);
    for (int i = 1; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].id == r->logit_bias[i - 1].id) {
            *code = "invalid_request";
            return rl_error(err, RL_EINPUT, "field 'logit_bias' names token %d "
                            "twice (\"%d\" and \"0%d\" are one id)", r->logit_bias[i].id,
                            r->logit_bias[i].id, r->logit_bias[i].id);
        }
    return 0;
}

static int openai_min_tokens(rlRequest *r, const char *key, const json_t *v, const char **code,
                             rlError *err) {
    long long x;
    if (request_get_int(v, key, 0, INT_MAX / 2, &x, code, err)) return -1;
    r->min_tokens = (int)x;
    return 0;
}

static int openai_bad_words(rlRequest *r, const char *key, const json_t *v, const char **code,
                            rlError *err) {
    if (request_get_array(v, key, 1, code, err)) return -1;
    size_t n = json_array_size(v);
    if (n && !(r->bad_words = calloc(n, sizeof(char *)))) return openai_oom(code, err, key);
    for (size_t i = 0; i < n; i++) {
        if (request_get_string(json_array_get(v, i), key, (int)i, 0, &r->bad_words[i], code, err))
            return -1;
        r->n_bad_words++;
    }
    return 0;
}

/* skip_special_tokens (default true, as vLLM) and include_stop_str_in_output
 * (default false): how the text is spelled (worker/tokenizer/detok.c). */
static int openai_flag(rlRequest *r, const char *key, const json_t *v, const char **code,
                       rlError *err) {
    int *out = !strcmp(key, "skip_special_tokens") ? &r->skip_special_tokens
                                                    : &r->include_stop_str_in_output;
    return request_get_bool(v, key, out, code, err);
}

static int openai_model(rlRequest *r, const char *key, const json_t *v, const char **code,
                        rlError *err) {
    return request_get_string(v, key, -1, 0, &r->model, code, err);
}

/* Characters (code points), as OpenAI counts its limits, not bytes. */
static size_t openai_chars(const char *s, size_t n) {
    size_t chars = 0, len;
    for (size_t i = 0; i < n; i += len ? len : 1, chars++) utf8_next((const unsigned char *)s + i, n - i, &len);
    return chars;
}

/* user: a string; metadata: string -> string (OpenAI: 16 pairs, keys up to
 * 64 and values up to 512 characters).  Both only travel back. */
static int openai_echo(rlRequest *r, const char *key, const json_t *v, const char **code,
                       rlError *err) {
    char *s = NULL;
    (void)r;
    if (!strcmp(key, "user")) {
        int rc = request_get_string(v, key, -1, 1, &s, code, err);
        free(s);
        return rc;
    }
    if (!json_is_object(v) || json_object_size(v) > 16)
        return openai_bad(code, err, "field 'metadata' must be an object of at most 16 string "
                                     "values");
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        size_t kl = strlen(k);
        if (!utf8_valid(k, kl, NULL) || openai_chars(k, kl) > 64 || !json_is_string(x) ||
            openai_chars(json_string_value(x), json_string_length(x)) > 512) {
            *code = "invalid_request";
            return rl_error(err, RL_EINPUT, "field 'metadata' holds keys of at "
                            "most 64 and string values of at most 512 characters ('%.64s' is "
                            "not one)", k);
        }
        if (request_get_string(x, "metadata", -1, 1, &s, code, err)) return -1;
        free(s);
        s = NULL;
    }
    return 0;
}

/* tool_choice: only "none" (or null), which is what redlm does: it has no
 * tool-call parser, so a model's tool calls come back as text in the
 * answer's content.  vLLM refuses "auto" without --tool-call-parser too;
 * "required" and a named function need constrained decoding. */
static int openai_tool_choice(rlRequest *r, const char *key, const json_t *v, const char **code,
                              rlError *err) {
    (void)r, (void)key;
    if (json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "none"))) return 0;
    return openai_bad(code, err, "field 'tool_choice' may only be \"none\": redlm has no tool-call parser, so "
                                 "the model's tool calls come back as text in the answer's content (vLLM also "
                                 "refuses \"auto\" without --tool-call-parser); leave tool_choice out or send "
                                 "\"none\"");
}

static const struct {
    const char *name;
    requestField read;
} openai_fields[] = {
    {"logprobs", openai_logprobs},
    {"top_logprobs", openai_top_logprobs},
    {"max_completion_tokens", openai_max_completion_tokens},
    {"presence_penalty", openai_penalty},
    {"frequency_penalty", openai_penalty},
    {"repetition_penalty", openai_penalty},
    {"logit_bias", openai_logit_bias},
    {"min_tokens", openai_min_tokens},
    {"bad_words", openai_bad_words},
    {"skip_special_tokens", openai_flag},
    {"include_stop_str_in_output", openai_flag},
    {"model", openai_model},
    {"user", openai_echo},
    {"metadata", openai_echo},
    {"tool_choice", openai_tool_choice},
};
#define OPENAI_N_FIELDS ((int)(sizeof(openai_fields) / sizeof(*openai_fields)))

int request_openai_field(rlRequest *r, const char *key, const json_t *v, const char **code,
                         rlError *err) {
    for (int i = 0; i < OPENAI_N_FIELDS; i++)
        if (!strcmp(key, openai_fields[i].name)) return openai_fields[i].read(r, key, v, code, err);
    return 1;
}

int request_openai_names(const char **names, int n) {
    int k = 0;
    for (; k < n && k < OPENAI_N_FIELDS; k++) names[k] = openai_fields[k].name;
    return k;
}

static int given(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v);
}

int request_openai_finish(rlRequest *r, const json_t *obj, const char **code, rlError *err) {
    if (given(obj, "max_tokens") && given(obj, "max_completion_tokens"))
        return openai_bad(code, err, "give 'max_tokens' or 'max_completion_tokens' (the same "
                                     "limit), not both");
    if (given(obj, "top_logprobs")) {
        if (!json_is_true(json_object_get(obj, "logprobs")))
            return openai_bad(code, err, "field 'top_logprobs' needs \"logprobs\": true");
        r->logprobs = (int)json_integer_value(json_object_get(obj, "top_logprobs"));
    }
    if ((r->given & RL_GIVEN_MAX_TOKENS) && r->min_tokens > r->max_tokens) {
        *code = "invalid_request";
        return rl_error(err, RL_EINPUT, "min_tokens (%d) is over max_tokens "
                        "(%d); lower min_tokens or raise max_tokens", r->min_tokens,
                        r->max_tokens);
    }
    if (given(obj, "user") || given(obj, "metadata")) {
        r->echo = json_object();
        if (!r->echo) return openai_oom(code, err, "metadata");
        if (given(obj, "user")) json_object_set(r->echo, "user", json_object_get(obj, "user"));
        if (given(obj, "metadata"))
            json_object_set_new(r->echo, "metadata", json_deep_copy(json_object_get(obj, "metadata")));
    }
    return 0;
}

void request_openai_free(rlRequest *r) {
    free(r->logit_bias);
    for (int i = 0; i < r->n_bad_words; i++) free(r->bad_words[i]);
    free(r->bad_words);
    free(r->model);
    json_decref(r->echo);
}

int request_content_text(const json_t *v, size_t msg, char **out, const char **code,
                         rlError *err) {
    char where[48];
    snprintf(where, sizeof(where), "messages[%zu].content", msg);
    if (json_is_string(v)) return request_get_string(v, where, -1, 1, out, code, err);
    if (!json_is_array(v)) {
        *code = "invalid_request";
        return rl_error(err, RL_EINPUT, "field '%s' must be a string or an array "
                        "of text parts [{\"type\": \"text\", \"text\": ...}]", where);
    }
    size_t total = 0, i;
    const json_t *p;
    json_array_foreach(v, i, p) {
        const json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_object(p) || json_object_size(p) != 2 || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            *code = "invalid_request";
            return rl_error(err, RL_EINPUT, "field '%s[%zu]' must be a text part "
                            "{\"type\": \"text\", \"text\": \"...\"} (images, audio and files are "
                            "not supported)", where, i);
        }
        total += json_string_length(text) + 1;
    }
    char *s = malloc(total + 1), *at = s;
    if (!s) return openai_oom(code, err, "messages");
    *s = 0;
    json_array_foreach(v, i, p) {
        char *part;
        char name[96];
        snprintf(name, sizeof(name), "%s[%zu].text", where, i);
        if (request_get_string(json_object_get(p, "text"), name, -1, 1, &part, code, err)) {
            free(s);
            return -1;
        }
        size_t n = strlen(part);
        if (i) *at++ = '\n';
        memcpy(at, part, n + 1);
        at += n;
        free(part);
    }
    *out = s;
    return 0;
}
