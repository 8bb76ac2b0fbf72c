/* jinja.h: the subset of Jinja2 that chat templates use, rendered exactly
 * as Hugging Face transformers renders a chat_template (an
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop
 * controls; its own `tojson`, `raise_exception` and `strftime_now`).
 *
 * A template is checked once at load: a tag, filter, test, function or
 * method outside the subset is refused there, by name, so a template either
 * renders as Python would or is not used at all.  Rendering is bounded
 * (steps, memory, output, macro depth): a hostile template fails with an
 * error instead of hanging or eating the host's memory. */
#ifndef RL_JINJA_H
#define RL_JINJA_H

#include <stddef.h>

#include "kernels/error.h"

struct json_t;

typedef struct jjTemplate jjTemplate;

typedef struct jjLimits {
    long long max_steps;        /* expressions and statements evaluated */
    size_t max_memory;          /* bytes of values one render may allocate */
    size_t max_output;          /* bytes of rendered text */
    int max_depth;              /* nested macro calls */
} jjLimits;

/* The limits a render gets when none are given: far above any real chat
 * template (Qwen3's, 10 messages: ~5,000 steps, ~100 KiB), far below what
 * would hold up a worker. */
void jinja_limits_default(jjLimits *lim);

/* Parse and check src (UTF-8).  name is for messages ("chat_template").
 * Errors are RL_EINPUT naming the line and the construct. */
jjTemplate *jinja_load(const char *src, size_t len, const char *name, rlError *err);
void jinja_free(jjTemplate *t);

/* Render with the variables of a JSON object (its keys are the template's
 * globals; absent names are undefined).  *out is malloc'd, NUL-terminated.
 * A failure (raise_exception, a type error Python would raise, a limit) is
 * RL_EINPUT with the template's message. */
int jinja_render(const jjTemplate *t, const struct json_t *vars, const jjLimits *lim,
                 char **out, size_t *out_len, rlError *err);

#endif
