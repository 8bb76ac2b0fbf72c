/* output.c: rlOutput -> the protocol's chunk / done / error event (json_t). */
#include "worker/engine/output.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "worker/tokenizer/tokenizer.h"

const char *output_finish_name(rlFinish f) {
    switch (f) {
    case RL_FINISH_STOP: return "stop";
    case RL_FINISH_LENGTH: return "length";
    case RL_FINISH_ABORT: return "abort";
    default: return NULL;
    }
}

/* {"id", "logprob", "top": [[id, logprob], ...]} */
static json_t *logprob_entry(const rlTokenLogprob *lp) {
    json_t *top = json_array();
    for (int i = 0; top && i < lp->n_top; i++)
        json_array_append_new(top, json_pack("[if]", (int)lp->top_ids[i], (double)lp->top_logprobs[i]));
    return json_pack("{s:i, s:f, s:o*}", "id", (int)lp->id, "logprob", (double)lp->logprob, "top", top);
}

static json_t *logprob_list(const rlTokenLogprob *lps, int from, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, i < from ? json_null() : logprob_entry(&lps[i]));
    return a;
}

/* map[id] = the id decoded alone (U+FFFD for a piece of a character), once */
static int token_text_add(json_t *map, const struct rlTokenizer *tok, int32_t id) {
    char key[16];
    snprintf(key, sizeof(key), "%d", (int)id);
    if (json_object_get(map, key)) return 0;
    char *text = NULL;
    size_t len = 0;
    rlError err;
    if (tokenizer_decode(tok, &id, 1, &text, &len, &err)) return -1;
    int bad = json_object_set_new(map, key, json_stringn(text, len));
    free(text);
    return bad;
}

/* The text of every id in lps (sampled and top), so a reader without the
 * tokenizer (redlm submit's OpenAI output) can spell them. */
static json_t *token_text(const struct rlTokenizer *tok, const rlTokenLogprob *lps, int from, int n,
                          json_t *map) {
    for (int i = from; map && i < n; i++) {
        int bad = token_text_add(map, tok, lps[i].id);
        for (int k = 0; k < lps[i].n_top && !bad; k++) bad = token_text_add(map, tok, lps[i].top_ids[k]);
        if (bad) {
            json_decref(map);
            return NULL;
        }
    }
    return map;
}

static json_t *token_list(const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* A float field as the shortest decimal that reads back to it: 0.7, not
 * 0.699999988079071. */
static double as_decimal(float f) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%.7g", (double)f);
    return strtod(buf, NULL);
}

json_t *output_event(const rlOutput *o, int seq) {
    const rlRequest *r = o->req;
    static const char *const kinds[] = {"chunk", "done", "error"};
    json_t *ev = json_pack("{s:s?, s:s}", "id", r ? r->id : NULL, "event", kinds[o->kind]);
    if (!ev) return NULL;
    int bad = 0;
    if (seq != OUTPUT_OFFLINE) {
        bad |= json_object_set_new(ev, "seq", json_integer(seq));
        bad |= json_object_set_new(ev, "attempt", json_integer(r ? r->attempt : 1));
    }
    if (r && r->echo) bad |= json_object_update(ev, r->echo);   /* user, metadata */
    if (o->kind == RL_OUT_ERROR) {
        bad |= json_object_set_new(ev, "error", json_pack("{s:s, s:s}", "code", o->error_code,
                                                          "message", o->error_message));
        if (bad) goto fail;
        return ev;
    }
    json_t *text = json_stringn(o->text ? o->text : "", o->text ? o->text_len : 0);
    if (!text) goto fail;
    bad |= json_object_set_new(ev, "index", json_integer(o->index));
    bad |= json_object_set_new(ev, "token_ids", token_list(o->token_ids, o->n_tokens));
    bad |= json_object_set_new(ev, "text", text);
    json_t *spell = o->tokenizer && (o->logprobs || o->prompt_logprobs) ? json_object() : NULL;
    if (o->logprobs) {
        bad |= json_object_set_new(ev, "logprobs", logprob_list(o->logprobs, 0, o->n_tokens));
        if (spell) spell = token_text(o->tokenizer, o->logprobs, 0, o->n_tokens, spell);
    }
    if (o->kind == RL_OUT_DONE) {
        if (o->model) bad |= json_object_set_new(ev, "model", json_string(o->model));
        bad |= json_object_set_new(ev, "finish_reason", json_string(output_finish_name(o->finish)));
        bad |= json_object_set_new(ev, "stop_reason",
                                   o->stop_str ? json_string(o->stop_str)
                                   : o->stop_by_token ? json_integer(o->stop_token)
                                                      : json_null());
        if (o->prompt_logprobs)
            bad |= json_object_set_new(ev, "prompt_logprobs",
                                       logprob_list(o->prompt_logprobs, 1, o->n_prompt));
        if (o->prompt_logprobs && spell)
            spell = token_text(o->tokenizer, o->prompt_logprobs, 1, o->n_prompt, spell);
        bad |= json_object_set_new(ev, "usage",
                                   json_pack("{s:i, s:i, s:i}", "prompt_tokens", o->prompt_tokens,
                                             "completion_tokens", o->completion_tokens,
                                             "cached_tokens", o->cached_tokens));
        if (r)   /* the values it sampled with: its own, else the model's defaults */
            bad |= json_object_set_new(
                ev, "sampling",
                json_pack("{s:f, s:f, s:i, s:f, s:f}", "temperature", as_decimal(r->temperature),
                          "top_p", as_decimal(r->top_p), "top_k", r->top_k, "min_p",
                          as_decimal(r->min_p), "repetition_penalty",
                          as_decimal(r->repetition_penalty)));
        /* whole milliseconds: finer digits are clock noise to a reader */
        bad |= json_object_set_new(ev, "timing",
                                   json_pack("{s:I, s:I, s:I}", "queued_ms", (json_int_t)llround(o->queued_ms),
                                             "first_token_ms", (json_int_t)llround(o->first_token_ms),
                                             "total_ms", (json_int_t)llround(o->total_ms)));
    }
    if (o->tokenizer && (o->logprobs || o->prompt_logprobs))
        bad |= json_object_set_new(ev, "token_text", spell);
    if (bad) goto fail;
    return ev;
fail:
    json_decref(ev);
    return NULL;
}
