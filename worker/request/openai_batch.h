/* openai_batch.h: the OpenAI Batch file format, both ways.
 *
 * Producers hand over files made for OpenAI's Batch API (`vllm run-batch`
 * reads the same): one line per call, {"custom_id", "method": "POST", "url":
 * "/v1/chat/completions" | "/v1/completions", "body": {...}}.  Both offline
 * front doors (`redlm generate`, `redlm submit`) turn such a line into our
 * request object here, run it as any other job, and turn the job's done
 * events (or its error) back into one output line {"id", "custom_id",
 * "response": {"status_code", "request_id", "body": <chat.completion or
 * text_completion>}, "error"}, so the two front doors write the same file. */
#ifndef RL_OPENAI_BATCH_H
#define RL_OPENAI_BATCH_H

#include <jansson.h>
#include <stddef.h>

#include "kernels/error.h"
#include "worker/lib/flags.h"

/* What the answer to one line needs from its input line. */
typedef struct rlBatchLine {
    char *custom_id;    /* NULL when the line has none (it is then an error) */
    int chat;           /* 1: /v1/chat/completions, 0: /v1/completions */
    char *model;        /* the body's model ("" when absent): the answer's when the done
                         * events do not name the served model */
    long line;          /* 1-based; names the answer of a line without custom_id */
} rlBatchLine;

/* --input-format's choices: auto (the first line decides), openai, redlm. */
extern const rlFlagChoice openai_batch_formats[];

/* Whether a file is read as OpenAI Batch lines: format is --input-format's
 * value; with auto, the first line decides (a JSON object with "custom_id"
 * and "body"). */
int openai_batch_detect(const char *format, const char *first_line, size_t len);

/* The output line's "id": "batch_req_<custom_id>", or "batch_req_line-<n>"
 * for a line without one (so a resumed run knows it is answered).  The
 * caller frees it. */
char *openai_batch_id(const rlBatchLine *bl);

/* Line -> the request object to run (our schema, worker/redis/PROTOCOL.md),
 * with no id set: the caller names the job.  NULL with err (RL_EINPUT, the
 * message naming the member) when the line is not a batch call we serve;
 * bl is filled as far as the line could be read either way. */
json_t *openai_batch_request(const char *line, size_t len, long lineno, rlBatchLine *bl, rlError *err);

/* The output line for a job: events are its done events by sample index
 * (n of them), or one error event.  NULL when out of memory. */
json_t *openai_batch_response(const rlBatchLine *bl, json_t *const *events, int n);

/* The output line for a call that never ran: response null, error {code,
 * message}. */
json_t *openai_batch_error(const rlBatchLine *bl, const char *code, const char *message);

void openai_batch_line_free(rlBatchLine *bl);

/* The duplicate check of an input file, line by line: the line's custom_id
 * (batch) or "id" (our requests) is noted in seen (id -> line number).
 * Returns the number of an earlier line with the same one, and copies the
 * id into id (at most cap bytes); 0 when none or the line has none.  A file
 * with repeats is refused whole before anything runs (as OpenAI refuses a
 * batch file whose custom_ids repeat), naming the lines. */
long openai_batch_repeat(json_t *seen, const char *line, size_t len, long lineno, int batch, char *id,
                         size_t cap);

#endif
