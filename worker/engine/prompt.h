/* prompt.h: a request's prompt, in whichever form the producer sent it
 * (text, chat messages or token ids), as the token ids the engine runs on.
 *
 * Sits between the request (what producers send) and the tokenizer (text
 * <-> ids) and chat template (messages -> text), so neither knows of
 * requests. */
#ifndef RL_PROMPT_H
#define RL_PROMPT_H

#include "kernels/error.h"
#include "worker/chat/chat.h"
#include "worker/request/request.h"
#include "worker/tokenizer/tokenizer.h"

/* Fill r->prompt_ids from r->prompt (encoded as is) or r->messages
 * (rendered with the model's chat template, then encoded); a request that
 * already has ids is left alone, one with no prompt form at all is an
 * RL_EINPUT error. */
int prompt_fill_ids(const rlTokenizer *t, const rlChat *chat, rlRequest *r, rlError *err);

#endif
