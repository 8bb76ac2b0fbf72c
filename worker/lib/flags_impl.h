/* flags_impl.h: what the files implementing flags.h share (the parse loop in
 * flags.c, values in flags_value.c, help and suggestions in flags_help.c). */
#ifndef RL_FLAGS_IMPL_H
#define RL_FLAGS_IMPL_H

#include "worker/lib/flags.h"

/* Store value v, given as `spelled` (the spelling typed, for messages). */
int flags_set(rlFlag *f, const char *spelled, const char *v, rlError *err);

/* The spelling of any flag of fs closest to the unknown `word` (at most a
 * few edits away), or NULL. */
const char *flags_closest(const rlFlags *fs, const char *word, char *buf, size_t len);

/* Call fn(spelling, len, ctx) for each spelling of f: its name, its aliases
 * and, for a negatable flag, their --no- forms (negated 1); stop early and
 * return 1 when fn does. */
int flags_each_spelling(const rlFlag *f,
                        int (*fn)(const char *s, size_t len, int negated, void *ctx), void *ctx);

#endif
