/* openai_batch.c: OpenAI Batch lines -> our requests, and our done events ->
 * OpenAI's answer objects (chat.completion, text_completion), in the shapes
 * of OpenAI's API reference and `vllm run-batch`.  Ids in the answer are
 * made from custom_id (not random as vLLM's), so `generate` and `submit`
 * write the same file for the same input; only `created` differs. */
#include "worker/request/openai_batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAT_URL "/v1/chat/completions"
#define COMPLETION_URL "/v1/completions"

const rlFlagChoice openai_batch_formats[] = {{"auto", NULL, 0}, {"openai", NULL, 0}, {"redlm", NULL, 0},
                                             {NULL, NULL, 0}};

int openai_batch_detect(const char *format, const char *line, size_t len) {
    if (strcmp(format, "auto")) return !strcmp(format, "openai");
    if (!line) return 0;
    json_t *v = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
    int yes = json_is_object(v) && json_object_get(v, "custom_id") && json_object_get(v, "body");
    json_decref(v);
    return yes;
}

long openai_batch_repeat(json_t *seen, const char *line, size_t len, long lineno, int batch, char *id,
                         size_t cap) {
    json_t *v = json_loadb(line, len, JSON_ALLOW_NUL | JSON_DISABLE_EOF_CHECK, NULL);
    const char *s = json_string_value(json_object_get(v, batch ? "custom_id" : "id"));
    json_t *first = s ? json_object_get(seen, s) : NULL;
    long earlier = first ? (long)json_integer_value(first) : 0;
    if (earlier) snprintf(id, cap, "%s", s);
    else if (s) json_object_set_new(seen, s, json_integer(lineno));
    json_decref(v);
    return earlier;
}

void openai_batch_line_free(rlBatchLine *bl) {
    free(bl->custom_id);
    free(bl->model);
    memset(bl, 0, sizeof(*bl));
}

/* A completions prompt: a string, an array of token ids, or an array of one
 * of either (OpenAI's batch of prompts in one call is not served: one line,
 * one prompt). */
static int batch_prompt(json_t *req, json_t *p, rlError *err) {
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) return json_object_set(req, "prompt", p);
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0)))
        return json_object_set(req, "prompt_token_ids", p);
    return rl_error(err, RL_EINPUT, "body.prompt must be a string or an array of token ids "
                                    "(one prompt per line: put each prompt on its own line)");
}

json_t *openai_batch_request(const char *line, size_t len, long lineno, rlBatchLine *bl, rlError *err) {
    memset(bl, 0, sizeof(*bl));
    bl->line = lineno;
    json_error_t je;
    json_t *v = json_loadb(line, len, JSON_ALLOW_NUL, &je), *req = NULL;
    if (!json_is_object(v)) {
        rl_error(err, RL_EINPUT, "not a JSON object: %s", v ? "a batch line is an object" : je.text);
        goto out;
    }
    json_t *cid = json_object_get(v, "custom_id"), *m = json_object_get(v, "method"),
           *url = json_object_get(v, "url"), *body = json_object_get(v, "body");
    if (json_is_string(cid) && !(bl->custom_id = strdup(json_string_value(cid)))) goto oom;
    if (json_is_object(body)) {
        json_t *model = json_object_get(body, "model");
        if (!(bl->model = strdup(json_is_string(model) ? json_string_value(model) : ""))) goto oom;
    }
    const char *u = json_string_value(url);
    bl->chat = u && !strcmp(u, CHAT_URL);
    if (!json_is_string(cid) || !json_string_length(cid)) {
        rl_error(err, RL_EINPUT, "custom_id must be a non-empty string naming the call");
        goto out;
    }
    if (m && (!json_is_string(m) || strcmp(json_string_value(m), "POST"))) {
        rl_error(err, RL_EINPUT, "method must be \"POST\"");
        goto out;
    }
    if (!u || (!bl->chat && strcmp(u, COMPLETION_URL))) {
        rl_error(err, RL_EINPUT, "url must be \"" CHAT_URL "\" or \"" COMPLETION_URL "\"");
        goto out;
    }
    if (!json_is_object(body)) {
        rl_error(err, RL_EINPUT, "body must be an object (the API call's request)");
        goto out;
    }
    json_t *stream = json_object_get(body, "stream");
    if (json_is_true(stream)) {
        rl_error(err, RL_EINPUT, "body.stream must be false or absent: a batch answers each call whole");
        goto out;
    }
    if (!(req = json_object())) goto oom;
    const char *k;
    json_t *x;
    json_object_foreach(body, k, x) {
        if (!strcmp(k, "stream") || !strcmp(k, "stream_options") || !strcmp(k, "prompt")) continue;
        if (!bl->chat && !strcmp(k, "messages")) {
            rl_error(err, RL_EINPUT, "body.messages belongs to " CHAT_URL "; " COMPLETION_URL " takes prompt");
            goto fail;
        }
        if (json_object_set(req, k, x)) goto oom;
    }
    json_t *prompt = json_object_get(body, "prompt");
    if (bl->chat) {
        if (prompt || !json_object_get(body, "messages")) {
            rl_error(err, RL_EINPUT, CHAT_URL " takes body.messages (not prompt)");
            goto fail;
        }
    } else {
        if (!prompt) {
            rl_error(err, RL_EINPUT, "body.prompt is required for " COMPLETION_URL);
            goto fail;
        }
        if (batch_prompt(req, prompt, err)) goto fail;
        /* OpenAI's and vLLM's completions default: 16 tokens */
        json_t *mt = json_object_get(body, "max_tokens");
        if ((!mt || json_is_null(mt)) && json_object_set_new(req, "max_tokens", json_integer(16))) goto oom;
    }
    if (json_object_set_new(req, "stream", json_false())) goto oom;
    goto out;
oom:
    rl_error(err, RL_EINTERNAL, "out of memory");
fail:
    json_decref(req);
    req = NULL;
out:
    json_decref(v);
    return req;
}

char *openai_batch_id(const rlBatchLine *bl) {
    char *id = malloc((bl->custom_id ? strlen(bl->custom_id) : 0) + 32);
    if (id && bl->custom_id) sprintf(id, "batch_req_%s", bl->custom_id);
    else if (id) sprintf(id, "batch_req_line-%ld", bl->line);
    return id;
}

static json_t *batch_line(const rlBatchLine *bl, json_t *response, json_t *error) {
    char *id = openai_batch_id(bl);
    json_t *line = NULL;
    if (id) {
        line = json_pack("{s:s, s:s?, s:o?, s:o?}", "id", id, "custom_id", bl->custom_id, "response",
                         response ? response : json_null(), "error", error ? error : json_null());
    } else {
        json_decref(response);
        json_decref(error);
    }
    free(id);
    return line;
}

json_t *openai_batch_error(const rlBatchLine *bl, const char *code, const char *message) {
    return batch_line(bl, NULL, json_pack("{s:s, s:s}", "code", code, "message", message));
}

/* OpenAI's token strings as vLLM writes them: the text, and its UTF-8 bytes. */
static const char *batch_token(const json_t *ev, json_int_t id) {
    char key[24];
    snprintf(key, sizeof(key), "%lld", (long long)id);
    const char *t = json_string_value(json_object_get(json_object_get(ev, "token_text"), key));
    return t ? t : "";
}

static json_t *batch_bytes(const char *t) {
    json_t *a = json_array();
    for (const unsigned char *p = (const unsigned char *)t; a && *p; p++)
        json_array_append_new(a, json_integer(*p));
    return a;
}

/* JSON has no -inf: vLLM writes -9999.0 for it. */
static double batch_lp(const json_t *v) {
    double x = json_number_value(v);
    return isfinite(x) ? x : -9999.0;
}

/* A chat choice's logprobs: {"content": [{token, bytes, logprob,
 * top_logprobs: [{token, bytes, logprob}]}], "refusal": null}. */
static json_t *chat_logprobs(const json_t *ev, const json_t *lps) {
    json_t *content = json_array();
    size_t i, k;
    json_t *e, *t;
    json_array_foreach(lps, i, e) {
        const char *tok = batch_token(ev, json_integer_value(json_object_get(e, "id")));
        json_t *top = json_array();
        json_array_foreach(json_object_get(e, "top"), k, t) {
            const char *tt = batch_token(ev, json_integer_value(json_array_get(t, 0)));
            json_array_append_new(top, json_pack("{s:s, s:o, s:f}", "token", tt, "bytes", batch_bytes(tt),
                                                 "logprob", batch_lp(json_array_get(t, 1))));
        }
        json_array_append_new(content, json_pack("{s:s, s:o, s:f, s:o}", "token", tok, "bytes", batch_bytes(tok),
                                                 "logprob", batch_lp(json_object_get(e, "logprob")),
                                                 "top_logprobs", top));
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* Characters in a token string: text_offset counts characters, as OpenAI's
 * and vLLM's (Python's len) do, not bytes.  Token strings are valid UTF-8
 * (a piece of a character is U+FFFD), so every byte but a continuation byte
 * starts one. */
static size_t batch_chars(const char *t) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) n += (*p & 0xC0) != 0x80;
    return n;
}

/* A completion choice's logprobs: {tokens, token_logprobs, top_logprobs:
 * [{token: logprob}], text_offset}.  Each top_logprobs object starts with
 * the sampled token, then the top k: OpenAI's completions API always
 * returns the sampled token's logprob there, so up to k + 1 entries (vLLM's
 * order too). */
static json_t *completion_logprobs(const json_t *ev, const json_t *lps) {
    json_t *tokens = json_array(), *lp = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, k, off = 0;
    json_t *e, *t;
    json_array_foreach(lps, i, e) {
        const char *tok = batch_token(ev, json_integer_value(json_object_get(e, "id")));
        json_array_append_new(tokens, json_string(tok));
        json_array_append_new(lp, json_real(batch_lp(json_object_get(e, "logprob"))));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += batch_chars(tok);
        json_t *top = json_object();
        json_object_set_new(top, tok, json_real(batch_lp(json_object_get(e, "logprob"))));
        json_array_foreach(json_object_get(e, "top"), k, t) {
            const char *tt = batch_token(ev, json_integer_value(json_array_get(t, 0)));
            if (!json_object_get(top, tt)) json_object_set_new(top, tt, json_real(batch_lp(json_array_get(t, 1))));
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lp, "top_logprobs", tops,
                     "text_offset", offs);
}

/* done's finish_reason in OpenAI's words (an abort, which a batch never
 * asks for, reads as stop). */
static const char *batch_finish(const json_t *ev) {
    const char *f = json_string_value(json_object_get(ev, "finish_reason"));
    return f && !strcmp(f, "length") ? "length" : "stop";
}

json_t *openai_batch_response(const rlBatchLine *bl, json_t *const *events, int n) {
    if (n >= 1 && events[0] && json_object_get(events[0], "error")) {
        json_t *e = json_object_get(events[0], "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        return openai_batch_error(bl, code ? code : "internal", msg ? msg : "");
    }
    const char *cid = bl->custom_id ? bl->custom_id : "";
    json_t *choices = json_array();
    json_int_t prompt_tokens = 0, completion_tokens = 0;
    for (int i = 0; choices && i < n; i++) {
        const json_t *ev = events[i];
        const json_t *usage = json_object_get(ev, "usage");
        prompt_tokens = json_integer_value(json_object_get(usage, "prompt_tokens"));
        completion_tokens += json_integer_value(json_object_get(usage, "completion_tokens"));
        const json_t *lps = json_object_get(ev, "logprobs");
        json_t *logprobs = !lps ? json_null() : bl->chat ? chat_logprobs(ev, lps) : completion_logprobs(ev, lps);
        json_t *text = json_object_get(ev, "text");
        json_t *c = bl->chat
                        ? json_pack("{s:i, s:{s:s, s:O, s:n}, s:o, s:s}", "index", i, "message", "role",
                                    "assistant", "content", text, "refusal", "logprobs", logprobs,
                                    "finish_reason", batch_finish(ev))
                        : json_pack("{s:i, s:O, s:o, s:s}", "index", i, "text", text, "logprobs", logprobs,
                                    "finish_reason", batch_finish(ev));
        if (!c || json_array_append_new(choices, c)) {
            json_decref(choices);
            return NULL;
        }
    }
    /* As vLLM: the model that answered (the worker's first served name,
     * whatever alias the call gave); the call's own where the done events
     * do not name it (workers before 0.4.0). */
    const char *model = n >= 1 ? json_string_value(json_object_get(events[0], "model")) : NULL;
    if (!model) model = bl->model ? bl->model : "";
    char *id = malloc(strlen(cid) + 16), *rid = malloc(strlen(cid) + 16);
    json_t *body = NULL;
    if (id && rid && choices) {
        sprintf(id, "%s%s", bl->chat ? "chatcmpl-" : "cmpl-", cid);
        sprintf(rid, "req_%s", cid);
        body = json_pack("{s:s, s:s, s:I, s:s, s:o, s:{s:I, s:I, s:I}}", "id", id, "object",
                         bl->chat ? "chat.completion" : "text_completion", "created", (json_int_t)time(NULL),
                         "model", model, "choices", choices, "usage", "prompt_tokens",
                         prompt_tokens, "completion_tokens", completion_tokens, "total_tokens",
                         prompt_tokens + completion_tokens);
        choices = NULL;
    }
    json_decref(choices);
    json_t *line = body ? batch_line(bl, json_pack("{s:i, s:s, s:o}", "status_code", 200, "request_id", rid,
                                                   "body", body), NULL)
                        : NULL;
    free(id);
    free(rid);
    return line;
}
