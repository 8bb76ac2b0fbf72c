/* prompt.h: a request's prompt, in whichever form the producer sent it
 * (text, chat messages or token ids), as the token ids the engine runs on.
 *
 * Sits between the request (what producers send) and the tokenizer (text
 * <-> ids), so the tokenizer knows nothing of requests. */
#ifndef RL_PROMPT_H
#define RL_PROMPT_H

#include "kernels/error.h"
#include "worker/request/request.h"
#include "worker/tokenizer/tokenizer.h"

/* Qwen2.5 ChatML: <|im_start|>{role}\n{content}<|im_end|>\n per message, the
 * default system message first when none is given, then
 * <|im_start|>assistant\n.  *text is malloc'd. */
int prompt_render_chat(const rlMessage *msgs, int n_msgs, char **text, rlError *err);

/* Fill r->prompt_ids from r->prompt (encoded as is) or r->messages
 * (rendered as ChatML, then encoded); a request that already has ids is
 * left alone, one with no prompt form at all is an RL_EINPUT error. */
int prompt_fill_ids(const rlTokenizer *t, rlRequest *r, rlError *err);

#endif
