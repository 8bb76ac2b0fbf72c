/* prompt.c: a request's prompt, in whichever of its three forms the
 * producer sent, turned into the token ids the engine runs on. */
#include <stdlib.h>
#include <string.h>

#include "worker/engine/prompt.h"

int prompt_fill_ids(const rlTokenizer *t, const rlChat *chat, rlRequest *r, rlError *err) {
    if (r->prompt_ids) return 0;
    /* Errors keep tokenizer_encode's message as it is: callers look for
     * its "invalid_utf8:" prefix. */
    if (r->prompt) return tokenizer_encode(t, r->prompt, strlen(r->prompt), &r->prompt_ids, &r->n_prompt_ids, err);
    if (!r->messages) return rl_error(err, RL_EINPUT, "no prompt: give one of prompt, messages or prompt_ids");
    char *text;
    size_t len;
    if (chat_render(chat, r->messages, r->tools, r->add_generation_prompt, r->chat_template_kwargs, &text, &len, err))
        return -1;
    if (r->continue_final_message && chat_continue_final(r->messages, text, &len, err)) {
        free(text);
        return -1;
    }
    int rc = tokenizer_encode(t, text, len, &r->prompt_ids, &r->n_prompt_ids, err);
    free(text);
    return rc;
}
