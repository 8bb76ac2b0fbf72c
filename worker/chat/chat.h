/* chat.h: a model's chat template, and a conversation rendered with it
 * exactly as Hugging Face transformers' apply_chat_template renders it.
 *
 * The template is the model directory's chat_template.jinja when there is
 * one, else tokenizer_config.json's `chat_template` (a string, or a list of
 * named templates: "tool_use" when tools are given, else "default"), both
 * as transformers reads them.  A model that ships none gets Qwen2.5's
 * template (ChatML with Qwen2.5's default system prompt), which is what
 * redlm rendered for every model before templates were read. */
#ifndef RL_CHAT_H
#define RL_CHAT_H

#include "kernels/error.h"

struct json_t;

typedef struct rlChat rlChat;

/* The template beside a tokenizer: dir is the model directory (or the
 * folder of a tokenizer.json).  Fails (RL_EMODEL) only when a file is
 * unreadable or malformed; a template that uses what the interpreter lacks
 * loads, and every render answers with that refusal (chat_error). */
rlChat *chat_open(const char *dir, rlError *err);
void chat_free(rlChat *ch);

/* One line for logs: where the template comes from, or that it is the
 * built-in fallback, or why it was refused. */
const char *chat_describe(const rlChat *ch);
/* The refusal of the model's template at load, or NULL. */
const rlError *chat_error(const rlChat *ch);

/* messages (array of message objects), tools (array or NULL),
 * add_generation_prompt, kwargs (object of extra template variables, such
 * as enable_thinking, or NULL) -> *text (malloc'd, *len bytes; a NUL in
 * the messages stays in the text).  Template errors
 * (raise_exception, type errors) are RL_EINPUT with the template's message. */
int chat_render(const rlChat *ch, const struct json_t *messages, const struct json_t *tools,
                int add_generation_prompt, const struct json_t *kwargs, char **text, size_t *len,
                rlError *err);

/* continue_final_message (transformers' and vLLM's): a rendered text cut
 * right after the final message's content (its last text part when the
 * content is a list), so that the model continues that message instead of
 * starting a new one.  *len shrinks; RL_EINPUT when the final message has
 * no text or the template did not render it. */
int chat_continue_final(const struct json_t *messages, char *text, size_t *len, rlError *err);

#endif
