/* intake.h: one stream entry -> a request for the engine, or its answer.
 *
 * Everything that can be wrong with an entry is decided here, before the
 * engine sees it: missing or doubled payload fields, bad encoding, invalid
 * UTF-8, a reply_to outside --reply-prefix, a failed validation, a passed
 * deadline, too many deliveries.  Each such entry gets the same treatment:
 * an error event when any part of it names a readable id, a dead-letter
 * copy, and XACK, so a bad entry costs one round trip and never a retry. */
#ifndef RL_INTAKE_H
#define RL_INTAKE_H

#include <hiredis/hiredis.h>

#include "worker/redis/item.h"
#include "worker/redis/metrics.h"
#include "worker/request/request.h"

typedef struct rlIntake {
    const rlKeys *keys;
    int max_deliveries;
    rlMetrics *metrics;   /* or NULL */
} rlIntake;

/* entry is one element of an XREADGROUP/XCLAIM reply: [id, [field, value, ...]]
 * (elements after those two are ignored)
 * (a nil field list is an entry deleted meanwhile).  Always creates the job
 * (*job; NULL only when out of memory).  Returns the request to run, with
 * req->user = *job, or NULL when the job was answered by items. */
rlRequest *intake_entry(const rlIntake *in, const redisReply *entry, int attempt, rlJob **job,
                        rlItemList *items);

#endif
