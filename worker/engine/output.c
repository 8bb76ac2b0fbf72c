/* output.c: rlOutput -> the protocol's chunk / done / error event (json_t). */
#include "worker/engine/output.h"

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

static json_t *token_list(const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

json_t *output_event(const rlOutput *o, int seq) {
    const rlRequest *r = o->req;
    static const char *const kinds[] = {"chunk", "done", "error"};
    json_t *ev = json_pack("{s:s?, s:s, s:i, s:i}", "id", r ? r->id : NULL, "event",
                           kinds[o->kind], "seq", seq, "attempt", r ? r->attempt : 1);
    if (!ev) return NULL;
    int bad = 0;
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
    if (o->logprobs) bad |= json_object_set_new(ev, "logprobs", logprob_list(o->logprobs, 0, o->n_tokens));
    if (o->kind == RL_OUT_DONE) {
        bad |= json_object_set_new(ev, "finish_reason", json_string(output_finish_name(o->finish)));
        if (o->prompt_logprobs)
            bad |= json_object_set_new(ev, "prompt_logprobs",
                                       logprob_list(o->prompt_logprobs, 1, o->n_prompt));
        bad |= json_object_set_new(ev, "usage",
                                   json_pack("{s:i, s:i, s:i}", "prompt_tokens", o->prompt_tokens,
                                             "completion_tokens", o->completion_tokens,
                                             "cached_tokens", o->cached_tokens));
        bad |= json_object_set_new(ev, "timing",
                                   json_pack("{s:f, s:f, s:f}", "queued_ms", o->queued_ms,
                                             "first_token_ms", o->first_token_ms, "total_ms",
                                             o->total_ms));
    }
    if (bad) goto fail;
    return ev;
fail:
    json_decref(ev);
    return NULL;
}
