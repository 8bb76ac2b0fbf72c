/* output.h: an engine output as a reply event of worker/redis/PROTOCOL.md.
 *
 * One place builds chunk, done and error events, so `redlm generate` and
 * the Redis worker answer with the same fields and spellings. */
#ifndef RL_OUTPUT_H
#define RL_OUTPUT_H

#include <jansson.h>

#include "worker/engine/engine.h"

/* seq of an offline result (`redlm generate`): no Redis-only fields. */
#define OUTPUT_OFFLINE (-1)

/* The event for out, numbered seq within its job and attempt (with `seq`
 * and `attempt` fields, unless seq is OUTPUT_OFFLINE); NULL when out of
 * memory or the text is not valid UTF-8 (the engine never emits such). */
json_t *output_event(const rlOutput *out, int seq);

const char *output_finish_name(rlFinish f);

#endif
