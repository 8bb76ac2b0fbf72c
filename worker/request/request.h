/* request.h: one job, as producers describe it (the request map of
 * worker/redis/PROTOCOL.md).
 *
 * Filled by request.c from a JSON or msgpack map (request_decode.h takes the
 * bytes), used by `redlm generate` offline and by the Redis worker alike.  Everything the engine needs to run
 * and answer the job is here; the engine takes ownership on engine_add(). */
#ifndef RL_REQUEST_H
#define RL_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/error.h"

#define RL_ID_MAX 256
/* A reply stream's name travels with every event the job writes: one of
 * megabytes would make each event that large.  A longer one is refused,
 * and answered on the default reply stream. */
#define RL_REPLY_TO_MAX 1024

struct json_t;

typedef struct rlLogitBias {
    int32_t id;
    float bias;
} rlLogitBias;

/* Sampling fields a request gave itself (rlRequest.given), recorded so the
 * model's generation_config.json defaults can fill the others (the engine
 * does, unless --generation-config vllm). */
enum {
    RL_GIVEN_TEMPERATURE = 1 << 0,
    RL_GIVEN_TOP_P = 1 << 1,
    RL_GIVEN_TOP_K = 1 << 2,
    RL_GIVEN_MIN_P = 1 << 3,
    RL_GIVEN_REPETITION_PENALTY = 1 << 4,
    RL_GIVEN_MAX_TOKENS = 1 << 5,
};

typedef struct rlRequest {
    char *id;                   /* 1..256 bytes */
    /* exactly one prompt form */
    char *prompt;               /* text, or NULL */
    struct json_t *messages;    /* chat: the array of message objects as sent, or NULL */
    int32_t *prompt_ids;        /* ids, or NULL (filled by tokenizing prompt/messages) */
    int n_prompt_ids;
    /* chat only: what the model's chat template gets besides the messages */
    struct json_t *tools;       /* tool definitions (an array), or NULL */
    struct json_t *chat_template_kwargs; /* extra template variables (an object), or NULL */
    int add_generation_prompt;  /* default 1 */
    int continue_final_message; /* default 0: the final message continued, not closed */

    int max_tokens;             /* default 256; 0 = score only */
    float temperature;          /* default 1.0; 0 = greedy */
    float top_p;                /* default 1.0 */
    int top_k;                  /* default 0 (off) */
    float min_p;                /* default 0.0 */
    int has_seed;
    uint64_t seed;
    int n;                      /* default 1 */
    char **stop;                /* stop strings */
    int n_stop;
    int32_t *stop_token_ids;
    int n_stop_token_ids;
    int ignore_eos;
    int logprobs;               /* -1 = not asked, else 0..20 */
    int prompt_logprobs;        /* -1 = not asked, else 0..20 */
    int stream;                 /* default 1 */
    char *reply_to;             /* NULL = redlm:reply:<id> */
    int priority;               /* default 0 */
    int64_t deadline_ms;        /* 0 = none */

    /* OpenAI / vLLM fields (request_openai.c) */
    float presence_penalty;     /* [-2, 2], default 0: output tokens, once */
    float frequency_penalty;    /* [-2, 2], default 0: output tokens, per occurrence */
    float repetition_penalty;   /* > 0, default 1 (off): prompt and output tokens */
    rlLogitBias *logit_bias;    /* sorted by id, each id once */
    int n_logit_bias;
    int min_tokens;             /* EOS and stop_token_ids banned before this many */
    char **bad_words;           /* never generated (as vLLM: with and without a leading space) */
    int n_bad_words;
    int skip_special_tokens;    /* default 1 (vLLM's): added tokens marked special leave no text */
    int include_stop_str_in_output; /* default 0: the stop string is dropped from the text */
    char *model;                /* checked against the served model's names, or NULL */
    struct json_t *echo;        /* {"user", "metadata"} as sent, or NULL: echoed back */
    unsigned given;             /* RL_GIVEN_*: the sampling fields the request set */

    /* set by whoever receives the job */
    int attempt;                /* delivery count, 1 normally */
    int64_t arrival_ms;         /* when it was received */
    void *user;                 /* the receiver's handle (stream entry, input line) */
} rlRequest;

void request_init(rlRequest *r);   /* protocol defaults */
void request_free(rlRequest *r);   /* frees the fields, not r */

/* Fill r (initialised) from one request object, validated exactly as
 * worker/redis/PROTOCOL.md says: types, ranges, exactly one prompt form, no unknown
 * field, UTF-8 strings (also inside tools and tool-call arguments).  On
 * failure returns -1, sets *code to the protocol
 * error code ("invalid_request" or "invalid_utf8") and fills err (RL_EINPUT)
 * with a message naming the field; r may be partly filled (free it).
 * Transport-free: JSON lines and msgpack entries both arrive as json_t. */
int request_parse(rlRequest *r, const struct json_t *obj, const char **code, rlError *err);

#endif
