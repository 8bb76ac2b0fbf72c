/* prompt.c: a request's prompt, in whichever of its three forms the
 * producer sent, turned into the token ids the engine runs on. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int tokenizer_prompt_ids(const rlTokenizer *t, rlRequest *r, rlError *err) {
    if (r->prompt_ids) return 0;
    if (r->prompt) {
        if (tokenizer_encode(t, r->prompt, strlen(r->prompt), &r->prompt_ids, &r->n_prompt_ids, err))
            return rl_error_wrap(err, "prompt");
        return 0;
    }
    if (!r->messages) return rl_error(err, RL_EINPUT, "no prompt: give one of prompt, messages or prompt_ids");
    char *text;
    if (tokenizer_render_chat(r->messages, r->n_messages, &text, err)) return -1;
    int rc = tokenizer_encode(t, text, strlen(text), &r->prompt_ids, &r->n_prompt_ids, err);
    free(text);
    return rc ? rl_error_wrap(err, "messages") : 0;
}
