/* request.c: one job's request map -> rlRequest, validated as
 * worker/redis/PROTOCOL.md says.
 *
 * Shared by `redlm generate` (JSON lines) and the Redis worker (JSON or
 * msgpack entries, both decoded to json_t first), so validation and its
 * messages are identical offline and online.  Every message names the field
 * and says what was expected, since the producer reading it cannot see our
 * source. */
#include "worker/request/request.h"
#include "worker/request/request_impl.h"
#include "worker/lib/spelling.h"
#include "worker/lib/utf8.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void request_init(rlRequest *r) {
    memset(r, 0, sizeof(*r));
    r->max_tokens = 256;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->n = 1;
    r->skip_special_tokens = 1;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
    r->stream = 1;
    r->attempt = 1;
    r->add_generation_prompt = 1;
    r->repetition_penalty = 1.0f;
}

void request_free(rlRequest *r) {
    free(r->id);
    free(r->prompt);
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->chat_template_kwargs);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_token_ids);
    free(r->reply_to);
    request_openai_free(r);
    memset(r, 0, sizeof(*r));
}

static const char *const INVALID = "invalid_request";

/* A copy of string value v of field `name` (element `idx` of it when >= 0). */
int request_get_string(const json_t *v, const char *name, int idx, int allow_empty, char **out,
                      const char **code, rlError *err) {
    char where[96];
    if (idx >= 0) snprintf(where, sizeof(where), "%s[%d]", name, idx);
    else snprintf(where, sizeof(where), "%s", name);
    if (!json_is_string(v)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field '%s' must be a string", where);
    }
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (!utf8_valid(s, len, NULL)) {
        *code = "invalid_utf8";
        return rl_error(err, RL_EINPUT, "field '%s' is not valid UTF-8", where);
    }
    if (strlen(s) != len) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field '%s' contains a NUL character",
                        where);
    }
    if (!allow_empty && len == 0) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field '%s' must not be empty", where);
    }
    if (!(*out = strdup(s))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field '%s'", where);
    }
    return 0;
}

/* An integer, or a number with no fraction (2.0), as vLLM's request models
 * (pydantic) take it; 1.5 is refused. */
int request_get_int(const json_t *v, const char *name, long long lo, long long hi, long long *out,
                   const char **code, rlError *err) {
    long long x = 0;
    int ok = json_is_integer(v);
    if (ok) x = json_integer_value(v);
    else if (json_is_real(v)) {
        double d = json_real_value(v);   /* within +-2^63, so the cast is defined */
        ok = d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0;
        if (ok) x = (long long)d;
    }
    if (!ok || x < lo || x > hi) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT,
                        "field '%s' must be an integer in [%lld, %lld]", name,
                        lo, hi);
    }
    *out = x;
    return 0;
}

/* A number in a range; lo_open/hi_open make that end exclusive. */
int request_get_float(const json_t *v, const char *name, double lo, int lo_open, double hi,
                     int hi_open, float *out, const char **code, rlError *err) {
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field '%s' must be a number in %c%g, %g%c",
                        name, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    }
    *out = (float)x;
    return 0;
}

int request_get_bool(const json_t *v, const char *name, int *out, const char **code, rlError *err) {
    if (!json_is_boolean(v)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field '%s' must be true or false", name);
    }
    *out = json_is_true(v);
    return 0;
}

int request_get_array(const json_t *v, const char *name, int allow_empty, const char **code,
                     rlError *err) {
    if (!json_is_array(v) || (!allow_empty && json_array_size(v) == 0) ||
        json_array_size(v) > INT_MAX / 8) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field '%s' must be a%s array", name,
                        allow_empty ? "n" : " non-empty");
    }
    return 0;
}

int request_get_ids(const json_t *v, const char *name, int allow_empty, int32_t **out, int *n,
                   const char **code, rlError *err) {
    if (request_get_array(v, name, allow_empty, code, err)) return -1;
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
                            "field '%s' must hold token ids (integers >= 0); "
                            "element %zu is not one", name, i);
        }
        (*out)[i] = (int32_t)json_integer_value(e);
        (*n)++;
    }
    return 0;
}

/* Every string inside v (keys too) valid UTF-8 without NUL, so a template
 * renders only text the tokenizer takes; `where` names v in messages. */
static int check_strings(const json_t *v, const char *where, const char **code, rlError *err) {
    const char *key;
    const json_t *x;
    size_t i;
    switch (json_typeof(v)) {
    case JSON_STRING:
        if (!utf8_valid(json_string_value(v), json_string_length(v), NULL)) {
            *code = "invalid_utf8";
            return rl_error(err, RL_EINPUT, "a string in '%s' is not valid UTF-8", where);
        }
        if (strlen(json_string_value(v)) != json_string_length(v)) {
            *code = INVALID;
            return rl_error(err, RL_EINPUT, "a string in '%s' contains a NUL character", where);
        }
        return 0;
    case JSON_ARRAY:
        json_array_foreach(v, i, x) if (check_strings(x, where, code, err)) return -1;
        return 0;
    case JSON_OBJECT:
        json_object_foreach((json_t *)v, key, x) {
            if (!utf8_valid(key, strlen(key), NULL)) {
                *code = "invalid_utf8";
                return rl_error(err, RL_EINPUT, "a key in '%s' is not valid UTF-8", where);
            }
            if (check_strings(x, where, code, err)) return -1;
        }
        return 0;
    default:
        return 0;
    }
}

static int bad_field(const char **code, rlError *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad_field(const char **code, rlError *err, const char *fmt, ...) {
    char msg[RL_ERROR_LEN - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    *code = INVALID;
    return rl_error(err, RL_EINPUT, "%s", msg);
}

/* Only the listed keys; `what` describes the object for the message. */
static int known_keys(const json_t *o, const char *const *keys, const char *where, const char *what,
                      const char **code, rlError *err) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        const char *const *k = keys;
        while (*k && strcmp(*k, key)) k++;
        if (!*k) return bad_field(code, err, "%s has unknown field '%s' (%s)", where, key, what);
    }
    return 0;
}

/* OpenAI-style tool calls: {"id", "type", "function": {"name", "arguments"}},
 * arguments an object, a JSON string or null. */
static int check_tool_calls(const json_t *calls, size_t m, const char **code, rlError *err) {
    static const char *const call_keys[] = {"id", "type", "function", NULL}, *const fn_keys[] = {"name", "arguments", NULL};
    if (!json_is_array(calls)) return bad_field(code, err, "field 'messages[%zu].tool_calls' must be an array", m);
    size_t i;
    const json_t *tc;
    json_array_foreach(calls, i, tc) {
        char where[96];
        snprintf(where, sizeof(where), "messages[%zu].tool_calls[%zu]", m, i);
        if (!json_is_object(tc)) return bad_field(code, err, "'%s' must be an object", where);
        if (known_keys(tc, call_keys, where, "a tool call is {\"id\", \"type\", \"function\"}", code, err)) return -1;
        const json_t *id = json_object_get(tc, "id"), *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
        if ((id && !json_is_string(id)) || (type && !json_is_string(type)))
            return bad_field(code, err, "'%s': id and type must be strings", where);
        if (!json_is_object(fn)) return bad_field(code, err, "'%s' needs \"function\": {\"name\", \"arguments\"}", where);
        if (known_keys(fn, fn_keys, where, "a function is {\"name\", \"arguments\"}", code, err)) return -1;
        const json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(json_object_get(fn, "name")) ||
            (args && !json_is_object(args) && !json_is_string(args) && !json_is_null(args)))
            return bad_field(code, err, "'%s.function' needs a string 'name' and 'arguments' as an object or a JSON "
                             "string", where);
    }
    return 0;
}

/* vLLM's reading of an assistant's tool calls (chat_utils'
 * _postprocess_messages): OpenAI sends `arguments` as a JSON string, and
 * templates expect an object (Qwen3's prints a string as it is, Llama
 * 3.1's quotes it again with tojson), so a string is parsed; absent, null,
 * "" or {} becomes {}; an empty tool_calls list is dropped so the template
 * takes its plain assistant path. */
static int parse_tool_arguments(json_t *m, size_t i, const char **code, rlError *err) {
    json_t *calls = json_object_get(m, "tool_calls");
    if (!json_is_array(calls) || strcmp(json_string_value(json_object_get(m, "role")), "assistant")) return 0;
    if (!json_array_size(calls)) {
        json_object_del(m, "tool_calls");
        return 0;
    }
    size_t k;
    json_t *tc;
    json_array_foreach(calls, k, tc) {
        json_t *fn = json_object_get(tc, "function"), *args = json_object_get(fn, "arguments"), *parsed;
        if (json_is_object(args) && json_object_size(args)) continue;
        if (json_is_string(args) && json_string_length(args)) {
            json_error_t je;
            parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &je);
            if (!parsed)
                return bad_field(code, err, "field 'messages[%zu].tool_calls[%zu].function.arguments' is not valid "
                                 "JSON (%s at character %d): send the arguments as a JSON object or a string "
                                 "holding one", i, k, je.text, je.position);
        } else {
            parsed = json_object();
        }
        if (!parsed || json_object_set_new(fn, "arguments", parsed)) {
            *code = "internal";
            return rl_error(err, RL_EINTERNAL, "out of memory reading field 'messages'");
        }
    }
    return 0;
}

static int get_messages(rlRequest *r, const char *key, const json_t *v, const char **code,
                        rlError *err) {
    (void)key;
    static const char *const keys[] = {"role", "content", "tool_calls", "reasoning_content", "name", "tool_call_id", NULL};
    if (request_get_array(v, "messages", 0, code, err)) return -1;
    size_t i;
    const json_t *m;
    json_array_foreach(v, i, m) {
        char where[64];
        snprintf(where, sizeof(where), "messages[%zu]", i);
        if (!json_is_object(m))
            return bad_field(code, err, "%s must be an object with a string 'role' (and 'content', ...)", where);
        if (known_keys(m, keys, where, "a message has role, content, tool_calls, reasoning_content, name, "
                       "tool_call_id", code, err))
            return -1;
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role) || json_string_length(role) == 0)
            return bad_field(code, err, "%s needs a non-empty string 'role'", where);
        static const char *const texts[] = {"content", "reasoning_content", "name", "tool_call_id", NULL};
        for (const char *const *k = texts; *k; k++) {
            const json_t *x = json_object_get(m, *k);
            if (x && !json_is_string(x) && !json_is_null(x) && !(json_is_array(x) && !strcmp(*k, "content")))
                return bad_field(code, err, "field '%s.%s' must be a string or null%s", where, *k,
                                 json_is_array(x) ? " (content parts are not supported: send the text)" : "");
        }
        const json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls) && check_tool_calls(calls, i, code, err)) return -1;
        if (!json_object_get(m, "content") && !(json_is_array(calls) && json_array_size(calls)))
            return bad_field(code, err, "%s needs 'content' (only an assistant message with tool_calls may leave it "
                             "out)", where);
    }
    if (check_strings(v, "messages", code, err)) return -1;
    if (!(r->messages = json_deep_copy(v))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field 'messages'");
    }
    /* The content the template sees is one string, as vLLM hands it to a
     * text-only template: OpenAI's text parts joined, and null or absent
     * content (an assistant's tool calls, as OpenAI's clients send them) "",
     * which templates such as Qwen3's would fail on as None. */
    json_array_foreach(r->messages, i, m) {
        json_t *content = json_object_get(m, "content");
        char *text;
        if (parse_tool_arguments((json_t *)m, i, code, err)) return -1;
        if (json_is_string(content)) continue;
        /* Setting "content" frees the parts: ask what it was first. */
        const int parts = json_is_array(content);
        if (parts && request_content_text(content, i, &text, code, err)) return -1;
        int bad = json_object_set_new((json_t *)m, "content", json_string(parts ? text : ""));
        if (parts) free(text);
        if (bad) {
            *code = "internal";
            return rl_error(err, RL_EINTERNAL, "out of memory reading field 'messages'");
        }
    }
    return 0;
}

/* tools: an array of objects (null: none), kept as sent for the template. */
static int get_tools(rlRequest *r, const char *key, const json_t *v, const char **code,
                     rlError *err) {
    (void)key;
    if (!json_is_array(v)) return bad_field(code, err, "field 'tools' must be an array of tool objects");
    size_t i;
    const json_t *t;
    json_array_foreach(v, i, t) if (!json_is_object(t)) return bad_field(code, err, "field 'tools[%zu]' must be an object", i);
    if (check_strings(v, "tools", code, err)) return -1;
    if (!(r->tools = json_deep_copy(v))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field 'tools'");
    }
    return 0;
}

/* chat_template_kwargs (vLLM's name): more template variables, such as
 * enable_thinking.  The ones the request has fields for are refused here. */
static int get_kwargs(rlRequest *r, const char *key, const json_t *v, const char **code,
                      rlError *err) {
    (void)key;
    if (!json_is_object(v))
        return bad_field(code, err, "field 'chat_template_kwargs' must be an object, e.g. {\"enable_thinking\": false}");
    static const char *const own[] = {"messages", "tools", "add_generation_prompt", "documents", NULL};
    for (const char *const *k = own; *k; k++)
        if (json_object_get(v, *k))
            return bad_field(code, err, "'chat_template_kwargs.%s' is not allowed%s", *k,
                             strcmp(*k, "documents") ? ": give it as the request's own field" : "");
    if (check_strings(v, "chat_template_kwargs", code, err)) return -1;
    if (!(r->chat_template_kwargs = json_deep_copy(v))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field 'chat_template_kwargs'");
    }
    return 0;
}

/* stop: a string or an array of them (OpenAI). */
static int get_stop(rlRequest *r, const char *key, const json_t *v, const char **code,
                    rlError *err) {
    (void)key;
    if (json_is_string(v)) {
        if (!(r->stop = calloc(1, sizeof(char *)))) {
            *code = "internal";
            return rl_error(err, RL_EINTERNAL, "out of memory reading field 'stop'");
        }
        if (request_get_string(v, "stop", -1, 0, &r->stop[0], code, err)) return -1;
        r->n_stop = 1;
        return 0;
    }
    if (!json_is_array(v)) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field 'stop' must be a string or an "
                        "array of strings");
    }
    if (request_get_array(v, "stop", 1, code, err)) return -1;
    size_t len = json_array_size(v);
    if (len && !(r->stop = calloc(len, sizeof(char *)))) {
        *code = "internal";
        return rl_error(err, RL_EINTERNAL, "out of memory reading field 'stop'");
    }
    for (size_t i = 0; i < len; i++) {
        if (request_get_string(json_array_get(v, i), "stop", (int)i, 0, &r->stop[i], code, err)) return -1;
        r->n_stop++;
    }
    return 0;
}

static int read_id(rlRequest *r, const char *key, const json_t *v, const char **code, rlError *err) {
    if (request_get_string(v, key, -1, 0, &r->id, code, err)) return -1;
    if (strlen(r->id) > RL_ID_MAX) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field 'id' is %zu bytes; at most %d", strlen(r->id),
                        RL_ID_MAX);
    }
    return 0;
}

static int read_prompt(rlRequest *r, const char *key, const json_t *v, const char **code,
                       rlError *err) {
    return request_get_string(v, key, -1, 1, &r->prompt, code, err);
}

static int read_generation_prompt(rlRequest *r, const char *key, const json_t *v,
                                  const char **code, rlError *err) {
    return request_get_bool(v, key, &r->add_generation_prompt, code, err);
}

static int read_continue_final(rlRequest *r, const char *key, const json_t *v,
                               const char **code, rlError *err) {
    return request_get_bool(v, key, &r->continue_final_message, code, err);
}

static int read_prompt_ids(rlRequest *r, const char *key, const json_t *v, const char **code,
                           rlError *err) {
    if (r->prompt_ids) {   /* both spellings: one form given twice */
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "give 'prompt_ids' or 'prompt_token_ids' (the same "
                        "field), not both");
    }
    return request_get_ids(v, key, 0, &r->prompt_ids, &r->n_prompt_ids, code, err);
}

static int read_max_tokens(rlRequest *r, const char *key, const json_t *v, const char **code,
                           rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, 0, INT_MAX / 2, &x, code, err)) return -1;
    r->max_tokens = (int)x;
    r->given |= RL_GIVEN_MAX_TOKENS;
    return 0;
}

static int read_temperature(rlRequest *r, const char *key, const json_t *v, const char **code,
                            rlError *err) {
    r->given |= RL_GIVEN_TEMPERATURE;
    return request_get_float(v, key, 0, 0, INFINITY, 0, &r->temperature, code, err);
}

static int read_top_p(rlRequest *r, const char *key, const json_t *v, const char **code,
                      rlError *err) {
    r->given |= RL_GIVEN_TOP_P;
    return request_get_float(v, key, 0, 1, 1, 0, &r->top_p, code, err);
}

static int read_min_p(rlRequest *r, const char *key, const json_t *v, const char **code,
                      rlError *err) {
    r->given |= RL_GIVEN_MIN_P;
    return request_get_float(v, key, 0, 0, 1, 1, &r->min_p, code, err);
}

static int read_top_k(rlRequest *r, const char *key, const json_t *v, const char **code,
                      rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, -1, INT_MAX, &x, code, err)) return -1;
    r->top_k = x < 0 ? 0 : (int)x;   /* -1 and 0: off (vLLM and ours) */
    r->given |= RL_GIVEN_TOP_K;
    return 0;
}

static int read_seed(rlRequest *r, const char *key, const json_t *v, const char **code,
                     rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, LLONG_MIN, LLONG_MAX, &x, code, err)) return -1;
    r->has_seed = 1;
    r->seed = (uint64_t)x;
    return 0;
}

static int read_n(rlRequest *r, const char *key, const json_t *v, const char **code,
                  rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, 1, 256, &x, code, err)) return -1;
    r->n = (int)x;
    return 0;
}

static int read_stop_token_ids(rlRequest *r, const char *key, const json_t *v, const char **code,
                               rlError *err) {
    return request_get_ids(v, key, 1, &r->stop_token_ids, &r->n_stop_token_ids, code, err);
}

static int read_ignore_eos(rlRequest *r, const char *key, const json_t *v, const char **code,
                           rlError *err) {
    return request_get_bool(v, key, &r->ignore_eos, code, err);
}

static int read_prompt_logprobs(rlRequest *r, const char *key, const json_t *v,
                                const char **code, rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, 0, 20, &x, code, err)) return -1;
    r->prompt_logprobs = (int)x;
    return 0;
}

static int read_stream(rlRequest *r, const char *key, const json_t *v, const char **code,
                       rlError *err) {
    return request_get_bool(v, key, &r->stream, code, err);
}

static int read_reply_to(rlRequest *r, const char *key, const json_t *v, const char **code,
                         rlError *err) {
    if (request_get_string(v, key, -1, 0, &r->reply_to, code, err)) return -1;
    if (strlen(r->reply_to) > RL_REPLY_TO_MAX) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT, "field 'reply_to' is %zu bytes; at most %d", strlen(r->reply_to),
                        RL_REPLY_TO_MAX);
    }
    return 0;
}

static int read_priority(rlRequest *r, const char *key, const json_t *v, const char **code,
                         rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, INT_MIN, INT_MAX, &x, code, err)) return -1;
    r->priority = (int)x;
    return 0;
}

static int read_deadline(rlRequest *r, const char *key, const json_t *v, const char **code,
                         rlError *err) {
    long long x = 0;
    if (request_get_int(v, key, 0, LLONG_MAX, &x, code, err)) return -1;
    r->deadline_ms = x;
    return 0;
}

/* The protocol's own fields; request_openai.c has the OpenAI / vLLM ones. */
static const struct {
    const char *name;
    requestField read;
} core_fields[] = {
    {"id", read_id},
    {"prompt", read_prompt},
    {"messages", get_messages},
    {"tools", get_tools},
    {"chat_template_kwargs", get_kwargs},
    {"add_generation_prompt", read_generation_prompt},
    {"continue_final_message", read_continue_final},
    {"prompt_ids", read_prompt_ids},
    {"prompt_token_ids", read_prompt_ids},
    {"max_tokens", read_max_tokens},
    {"temperature", read_temperature},
    {"top_p", read_top_p},
    {"min_p", read_min_p},
    {"top_k", read_top_k},
    {"seed", read_seed},
    {"n", read_n},
    {"stop", get_stop},
    {"stop_token_ids", read_stop_token_ids},
    {"ignore_eos", read_ignore_eos},
    {"prompt_logprobs", read_prompt_logprobs},
    {"stream", read_stream},
    {"reply_to", read_reply_to},
    {"priority", read_priority},
    {"deadline_ms", read_deadline},
};
#define CORE_N_FIELDS ((int)(sizeof(core_fields) / sizeof(*core_fields)))

/* An unknown field, refused with the known names it is close to. */
static int request_unknown(const char *key, const char **code, rlError *err) {
    const char *names[64];
    int n = 0;
    for (; n < CORE_N_FIELDS; n++) names[n] = core_fields[n].name;
    n += request_openai_names(names + n, 64 - n);
    char near[256] = "";
    *code = INVALID;
    /* Qwen3's switch, sent beside the messages as Qwen's examples pass it
     * to apply_chat_template; vLLM takes it in chat_template_kwargs. */
    if (!strcmp(key, "enable_thinking"))
        return rl_error(err, RL_EINPUT, "unknown field 'enable_thinking': a chat template variable goes in "
                        "'chat_template_kwargs', as vLLM takes it: {\"chat_template_kwargs\": "
                        "{\"enable_thinking\": false}}");
    if (spelling_near(key, names, n, near, sizeof(near)))
        return rl_error(err, RL_EINPUT, "unknown field '%s' (did you mean %s?)",
                        key, near);
    /* no close spelling: name them all, since a producer reading this on a
     * reply stream has no documentation at hand */
    char list[1024];
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof(list); i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "", names[i]);
    return rl_error(err, RL_EINPUT, "unknown field '%s'; the request fields are %s", key, list);
}

static int request_known(const char *key) {
    const char *names[64];
    int n = request_openai_names(names, 64);
    for (int i = 0; i < CORE_N_FIELDS; i++)
        if (!strcmp(key, core_fields[i].name)) return 1;
    for (int i = 0; i < n; i++)
        if (!strcmp(key, names[i])) return 1;
    return 0;
}

static int field(rlRequest *r, const char *key, const json_t *v, const char **code, rlError *err) {
    for (int i = 0; i < CORE_N_FIELDS; i++)
        if (!strcmp(key, core_fields[i].name)) return core_fields[i].read(r, key, v, code, err);
    int rc = request_openai_field(r, key, v, code, err);
    if (rc <= 0) return rc;
    return request_unknown(key, code, err);
}

int request_parse(rlRequest *r, const json_t *obj, const char **code, rlError *err) {
    *code = INVALID;
    if (!json_is_object(obj))
        return rl_error(err, RL_EINPUT, "a request must be a JSON object");
    /* The id first, so every later error can be answered under it. */
    const json_t *id = json_object_get(obj, "id");
    if (!id) return rl_error(err, RL_EINPUT, "field 'id' is required");
    if (field(r, "id", id, code, err)) return -1;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        /* null is "not given" (the OpenAI API's and vLLM's reading): the
         * field's default; an unknown name is refused all the same */
        if (!strcmp(key, "id") || (json_is_null(v) && request_known(key))) continue;
        if (field(r, key, v, code, err)) return -1;
    }
    int forms = (r->prompt != NULL) + (r->messages != NULL) + (r->prompt_ids != NULL);
    if (forms != 1) {
        *code = INVALID;
        return rl_error(err, RL_EINPUT,
                        "give exactly one of 'prompt', 'messages', 'prompt_ids' "
                        "(got %d)", forms);
    }
    static const char *const chat_only[] = {"tools", "chat_template_kwargs", "add_generation_prompt",
                                            "continue_final_message", NULL};
    for (const char *const *k = chat_only; *k && !r->messages; k++)
        if (json_object_get(obj, *k) && !json_is_null(json_object_get(obj, *k)))
            return bad_field(code, err, "field '%s' applies to 'messages' only (this request has '%s')", *k,
                             r->prompt ? "prompt" : "prompt_ids");
    /* Continuing the final message opens no new one: add_generation_prompt
     * is off unless the request turns it on, which vLLM refuses too. */
    if (r->continue_final_message) {
        if (json_is_true(json_object_get(obj, "add_generation_prompt")))
            return bad_field(code, err, "fields 'continue_final_message' and 'add_generation_prompt' "
                             "cannot both be true: the first continues the final message, the "
                             "second starts a new assistant message");
        r->add_generation_prompt = 0;
    }
    return request_openai_finish(r, obj, code, err);
}
