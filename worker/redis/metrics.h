/* metrics.h: the worker's Prometheus metrics, served over HTTP.
 *
 * Names follow vLLM's (vllm:num_requests_running ...) with the redlm:
 * prefix, so dashboards built for vLLM need only the prefix changed.  The
 * engine thread records, the HTTP thread (libmicrohttpd) reads; one mutex,
 * held for microseconds, is all the sharing there is. */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stddef.h>

#include "kernels/error.h"
#include "worker/engine/engine.h"

typedef struct rlMetrics rlMetrics;

/* quantization: how the weights are stored (engine_quantization), shown as
 * redlm:model_info{quantization="..."} 1; NULL while the model is not
 * loaded yet (no model_info until metrics_set_quantization). */
rlMetrics *metrics_create(const char *quantization);
void metrics_set_quantization(rlMetrics *m, const char *quantization);
void metrics_free(rlMetrics *m);   /* stops the HTTP server too */

/* At most this many HTTP connections at once (more wait in the kernel's
 * accept queue), each closed after this many seconds without a byte either way. */
#define METRICS_MAX_CONNECTIONS 32
#define METRICS_IDLE_S 10

/* Serve GET (or HEAD) /metrics on port (all interfaces); other methods get
 * 405, other paths 404. */
int metrics_serve(rlMetrics *m, int port, rlError *err);

void metrics_set_engine(rlMetrics *m, const rlEngineStats *st);
/* The writer's backlog and the writes Redis refused so far. */
void metrics_set_writer(rlMetrics *m, size_t bytes, size_t items, unsigned long errors);
/* Whether the worker holds because Redis refuses its writes (serve.c). */
void metrics_set_held(rlMetrics *m, int held);
/* One finished sample: finish reason, latencies in seconds (tpot < 0 when
 * fewer than two tokens were generated). */
void metrics_observe_done(rlMetrics *m, rlFinish finish, double ttft, double tpot, double e2e);
void metrics_count_error(rlMetrics *m, const char *code);

/* The exposition text; malloc'd. */
char *metrics_render(rlMetrics *m);

#endif
