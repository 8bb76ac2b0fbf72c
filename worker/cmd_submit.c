/* cmd_submit.c: `redlm submit`: push a JSONL file of jobs through Redis and
 * collect the results, for offline batch runs on a worker pool.
 *
 * At most --window jobs are outstanding, counted from the oldest result not
 * yet written, so memory stays bounded however large the file and results
 * come out in input order.  All jobs of a run share one reply stream, read
 * with XREAD.  The output file is the checkpoint: a restarted run reads the
 * ids already in it and submits only the others (ids missing from the input
 * are derived from the input path and line number, so they are the same on
 * every run).  Synchronous hiredis is enough here: one connection, and the
 * loop alternates pipelined XADDs with one blocking XREAD. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "worker/commands.h"
#include "worker/lib/flags.h"
#include "worker/lib/files.h"
#include "worker/lib/redis_url.h"
#include "worker/redis/instances.h"
#include "worker/lib/now.h"
#include "worker/request/openai_batch.h"
#include "worker/request/request.h"

typedef struct subSlot {
    long line;                  /* input line number, 1-based; 0 = free */
    char *id;
    int n;                      /* samples expected */
    int attempt, next_seq;
    json_t **acc;               /* per sample: chunk accumulation, then the done event */
    int n_done;
    json_t *error;              /* an error event ends the job */
    json_t *local;              /* a result decided without Redis (bad input line) */
    int skip;                   /* already in the output file */
    rlBatchLine batch;          /* an OpenAI Batch line: what its answer needs */
    int answered;               /* every result is in (counted once) */
    char *payload;              /* the job as submitted, until answered: sent again after duplicate_id */
    double retry_at;            /* when to send it again (0: not waiting) */
    double retry_wait;          /* the wait before the next time */
} subSlot;

typedef struct subRun {
    redisContext *c;
    const char *stream;
    char reply_key[320];
    char last_id[48];
    FILE *in, *out;
    long next_line;             /* lines read so far = the last line's number */
    int eof;
    subSlot *slots;             /* ring of window entries, by line % window */
    int window;
    long oldest;                /* oldest line not written yet (1-based) */
    json_t *by_id;              /* id -> line (integer) of in-flight jobs */
    json_t *custom_ids;         /* an OpenAI Batch input's custom_id -> its line, every one read */
    json_t *done_ids;           /* ids already in the output file */
    /* the output file's last job, which a killed run may have left with
     * only some of its samples: its id, where its lines start, how many
     * there are, and whether one is its (final) error */
    char *tail_id;
    long tail_offset;
    int tail_lines, tail_final;
    char id_prefix[32];
    /* submitted: XADDs; answered: of those, jobs whose results are all in;
     * local: lines answered here (not a request); errors: error results,
     * either kind; skipped: already in the output; completed: written. */
    long submitted, answered, local, errors, skipped, completed;
    long blank;                 /* blank lines (no job) */
    int retrying;               /* jobs sent again after duplicate_id (the first few are said) */
    int detected;               /* the first line that is not blank was read (and the format known) */
    double t0;
    double timeout;             /* --timeout: give up after this many seconds (0: never) */
    const char *out_name;
    int tty;
    const char *format;         /* --input-format */
    int batch;                  /* the input is OpenAI Batch lines */
    double next_live_check;
    int no_worker;              /* warned that no live worker reads the stream */
} subRun;

/* Exit status of a run --timeout ended, as timeout(1)'s. */
#define SUB_TIMEOUT 124

static void sub_slot_clear(subSlot *s) {
    free(s->id);
    if (s->acc)
        for (int i = 0; i < s->n; i++) json_decref(s->acc[i]);
    free(s->acc);
    json_decref(s->error);
    json_decref(s->local);
    openai_batch_line_free(&s->batch);
    free(s->payload);
    memset(s, 0, sizeof(*s));
}

/* A line of only a line ending (or nothing) is no job: skipped, its number
 * kept, as `redlm generate` does. */
static int sub_blank(const char *line, ssize_t n) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    return n <= 0;
}

/* Two lines with one id would share one reply stream's events, and the
 * second could never be told from the first (in an OpenAI Batch file, two
 * answers with one custom_id): refuse them before anything is submitted.
 * Returns the number of duplicate lines (each one named). */
static long sub_check_ids(FILE *in, const char *path, const char *format) {
    json_t *seen = json_object();
    char *line = NULL, id[201];
    size_t cap = 0;
    long lineno = 0, dups = 0;
    int batch = -1;
    ssize_t n;
    while (seen && (n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (sub_blank(line, n)) continue;
        if (batch < 0) batch = openai_batch_detect(format, line, (size_t)n);
        long first = openai_batch_repeat(seen, line, (size_t)n, lineno, batch, id, sizeof(id));
        if (first && dups++ < 10)
            fprintf(stderr, "redlm submit: %s: line %ld has the %s '%s' of line %ld\n", path, lineno,
                    batch ? "custom_id" : "id", id, first);
    }
    free(line);
    json_decref(seen);
    rewind(in);
    if (dups)
        fprintf(stderr, "redlm submit: %ld lines of %s repeat an earlier line's %s; nothing submitted: %s\n",
                dups, path, batch > 0 ? "custom_id" : "id",
                batch > 0 ? "give every call its own custom_id"
                          : "give every job its own id (or leave \"id\" out to have one made from the line number)");
    return dups;
}

/* Read the ids of the results already in the output file; cut a last line
 * that a killed run left half-written. */
static int sub_resume(subRun *r, const char *path) {
    FILE *f = fopen(path, "r+");
    if (!f) return errno == ENOENT ? 0 : -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long good = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') break;
        json_t *v = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, NULL);
        /* an OpenAI Batch answer is known by its call's custom_id, or by
         * its id when the line had none */
        json_t *cid = json_object_get(v, "custom_id");
        const char *id = json_string_value(json_is_string(cid) ? cid : json_object_get(v, "id"));
        int bad = 0;
        if (id) {
            json_object_set_new(r->done_ids, id, json_true());
            if (r->tail_id && !strcmp(r->tail_id, id)) r->tail_lines++;
            else {
                free(r->tail_id);
                bad = !(r->tail_id = strdup(id));
                r->tail_offset = good;
                r->tail_lines = 1;
                r->tail_final = 0;
            }
            const char *event = json_string_value(json_object_get(v, "event"));
            if (event && !strcmp(event, "error")) r->tail_final = 1;
        }
        json_decref(v);
        if (bad) {
            free(line);
            fclose(f);
            errno = ENOMEM;
            return -1;
        }
        good += n;
    }
    free(line);
    int rc = ftruncate(fileno(f), good);
    fclose(f);
    return rc;
}

/* Counts as of now: a job is done when its results are in, whether or not
 * the output has reached it yet (it is written in input order). */
static void sub_progress(subRun *r, int final) {
    if (!r->tty) return;
    double el = now_s() - r->t0;
    long done = r->answered + r->local;
    double rate = el > 0 ? done / el : 0;
    char total[32] = "", eta[32] = "";
    if (r->eof) {
        long all = r->next_line - r->skipped - r->blank;
        snprintf(total, sizeof(total), "/%ld", all);
        if (rate > 0 && all > done) snprintf(eta, sizeof(eta), ", ETA %.0f s", (all - done) / rate);
    }
    fprintf(stderr, "\r%ld%s done, %ld in flight, %ld errors, %ld skipped, %.1f jobs/s%s   %s", done, total,
            r->submitted - r->answered, r->errors, r->skipped, rate, eta, final ? "\n" : "");
}

/* Warn, within INSTANCES_LIVE_S of it being true, that no live worker reads
 * the stream: jobs would wait there in silence. */
static void sub_check_workers(subRun *r) {
    if (now_s() < r->next_live_check) return;
    r->next_live_check = now_s() + INSTANCES_LIVE_S / 2;
    rlError err;
    int live = instances_live(r->c, r->stream, &err);
    if (live < 0) {
        fprintf(stderr, "%sredlm submit: %s\n", r->tty ? "\n" : "", err.msg);
        return;
    }
    if (live == 0 && !r->no_worker)
        fprintf(stderr, "%sredlm submit: warning: no live worker reads %s (no heartbeat in %s* within %.0f s); "
                        "the jobs wait in the stream until one starts\n", r->tty ? "\n" : "", r->stream,
                KEYS_HEARTBEAT_PREFIX, INSTANCES_LIVE_S);
    else if (live > 0 && r->no_worker)
        fprintf(stderr, "%sredlm submit: %d live worker%s read%s %s now\n", r->tty ? "\n" : "", live,
                live > 1 ? "s" : "", live > 1 ? "" : "s", r->stream);
    r->no_worker = live == 0;
}

/* Append b's tokens, text, logprobs and their spellings to a (one sample's
 * events). */
static void sub_merge(json_t *a, const json_t *b) {
    json_t *ta_map = json_object_get(a, "token_text"), *tb_map = json_object_get(b, "token_text");
    if (json_is_object(ta_map) && json_is_object(tb_map)) json_object_update(ta_map, tb_map);
    static const char *arrays[] = {"token_ids", "logprobs"};
    for (int i = 0; i < 2; i++) {
        json_t *x = json_object_get(a, arrays[i]), *y = json_object_get(b, arrays[i]);
        if (json_is_array(x) && json_is_array(y)) json_array_extend(x, y);
        else if (!x && json_is_array(y)) json_object_set(a, arrays[i], y);
    }
    json_t *ta = json_object_get(a, "text"), *tb = json_object_get(b, "text");
    if (json_is_string(ta) && json_is_string(tb)) {
        size_t la = json_string_length(ta), lb = json_string_length(tb);
        char *s = malloc(la + lb + 1);
        if (!s) return;
        memcpy(s, json_string_value(ta), la);
        memcpy(s + la, json_string_value(tb), lb);
        json_string_setn_nocheck(ta, s, la + lb);
        free(s);
    }
}

static void sub_answered(subRun *r, subSlot *s) {
    if (s->answered || !(s->error || s->n_done >= s->n)) return;
    s->answered = 1;
    r->answered++;
    if (s->error) r->errors++;
}

static void sub_event(subRun *r, json_t *ev) {
    const char *id = json_string_value(json_object_get(ev, "id"));
    json_t *line = id ? json_object_get(r->by_id, id) : NULL;
    if (!line) return; /* a late repeat of a finished job */
    subSlot *s = &r->slots[json_integer_value(line) % r->window];
    int attempt = (int)json_integer_value(json_object_get(ev, "attempt"));
    int seq = (int)json_integer_value(json_object_get(ev, "seq"));
    if (attempt < s->attempt) return;
    if (attempt > s->attempt) {
        /* another worker took the job over: start again from its events */
        for (int i = 0; i < s->n; i++) json_decref(s->acc[i]), s->acc[i] = NULL;
        s->n_done = 0;
        s->attempt = attempt;
        s->next_seq = 0;
    }
    if (seq < s->next_seq) return; /* written twice across a reconnect */
    s->next_seq = seq + 1;
    const char *kind = json_string_value(json_object_get(ev, "event"));
    const char *code = json_string_value(json_object_get(json_object_get(ev, "error"), "code"));
    if (kind && !strcmp(kind, "error") && code && !strcmp(code, "duplicate_id") && s->payload && !s->error) {
        /* a job with this id still runs: an earlier run of this input
         * stopped (--timeout, a signal, Redis lost) leaves its jobs running,
         * and their answers go to that run's reply stream.  Submit it again
         * once that one is done, rather than record the refusal. */
        if (!s->retry_wait && r->retrying++ < 3)
            fprintf(stderr, "%sredlm submit: job %s is running from an earlier submission; it goes again when "
                    "that one is done\n", r->tty ? "\n" : "", s->id);
        s->retry_wait = s->retry_wait ? (s->retry_wait * 2 > 8 ? 8 : s->retry_wait * 2) : 0.5;
        s->retry_at = now_s() + s->retry_wait;
        s->attempt = 1;
        s->next_seq = 0; /* the new entry's events start again from seq 0 */
        return;
    }
    if (kind && !strcmp(kind, "error")) {
        if (!s->error) s->error = json_incref(ev);
        sub_answered(r, s);
        return;
    }
    json_int_t index = json_integer_value(json_object_get(ev, "index"));
    if (index < 0 || index >= s->n || !kind) return;
    json_t **acc = &s->acc[index];
    if (!*acc) *acc = json_deep_copy(ev);
    else {
        sub_merge(*acc, ev);
        const char *k;
        json_t *v;
        json_object_foreach(ev, k, v) if (strcmp(k, "token_ids") && strcmp(k, "text") && strcmp(k, "logprobs") &&
                                          strcmp(k, "token_text"))
            json_object_set(*acc, k, v);
    }
    if (!strcmp(kind, "done")) s->n_done++;
    sub_answered(r, s);
}

/* How many done events a request asks for (its n; 1 when n is unusable,
 * which the worker answers with one error). */
static int sub_samples(const json_t *req) {
    json_t *jn = json_object_get(req, "n");
    return json_is_integer(jn) && json_integer_value(jn) > 0 && json_integer_value(jn) < 1 << 20
               ? (int)json_integer_value(jn) : 1;
}

/* The output's last job lacks some of the samples its request asks for:
 * cut its lines so it runs again.  Only possible before this run wrote
 * anything (the output is in input order, so with the same input that job
 * comes first); otherwise the input changed since the output was written. */
static int sub_cut_tail(subRun *r, const char *id, int *code) {
    if (r->completed) {
        fprintf(stderr, "redlm submit: job %s, the last in the output, lacks samples but results of other jobs "
                        "were written before it was read: is this the input the output was made from?\n", id);
        *code = RL_EINPUT;
        return -1;
    }
    if (fflush(r->out) || ftruncate(fileno(r->out), r->tail_offset)) {
        fprintf(stderr, "redlm submit: cutting the incomplete job %s from the output failed: %s\n", id,
                strerror(errno));
        *code = RL_EIO;
        return -1;
    }
    json_object_del(r->done_ids, id);
    free(r->tail_id);
    r->tail_id = NULL;
    return 0;
}

static int sub_slot_finished(const subSlot *s) {
    return s->skip || s->local || s->error || (s->n && s->n_done >= s->n);
}

static int sub_write_line(subRun *r, json_t *v) {
    json_object_del(v, "seq");
    char *t = json_dumps(v, JSON_COMPACT);
    if (!t) return -1;
    int bad = fputs(t, r->out) < 0 || fputc('\n', r->out) < 0;
    free(t);
    return bad ? -1 : 0;
}

/* Write every finished job at the head of the window, in input order. */
static int sub_flush(subRun *r) {
    while (r->oldest <= r->next_line) {
        subSlot *s = &r->slots[r->oldest % r->window];
        if (!sub_slot_finished(s)) break;
        if (!s->skip) {
            int bad = 0;
            if (r->batch && !s->local) {
                json_t *v = openai_batch_response(&s->batch, s->error ? &s->error : s->acc, s->error ? 1 : s->n);
                bad = !v || sub_write_line(r, v);
                json_decref(v);
            } else if (s->local || s->error) {
                bad = sub_write_line(r, s->local ? s->local : s->error); /* errors counted when answered */
            } else
                for (int i = 0; i < s->n && !bad; i++) bad = sub_write_line(r, s->acc[i]);
            if (bad || fflush(r->out)) return -1;
            r->completed++;
            json_object_del(r->by_id, s->id);
        }
        sub_slot_clear(s);
        r->oldest++;
    }
    return 0;
}

/* Read input lines while the window has room; returns how many XADDs were
 * appended to the pipeline, or -1 with the error reported and *code set. */
static int sub_fill(subRun *r, char **buf, size_t *cap, int *code) {
    int sent = 0;
    while (!r->eof && r->next_line - r->oldest + 1 < r->window) {
        ssize_t n = getline(buf, cap, r->in);
        if (n < 0) {
            if (ferror(r->in)) {
                fprintf(stderr, "redlm submit: reading --input failed after line %ld: %s\n", r->next_line,
                        strerror(errno));
                *code = RL_EIO;
                return -1;
            }
            r->eof = 1;
            break;
        }
        long lineno = ++r->next_line; /* lines are 1-based; slot index uses lineno */
        subSlot *s = &r->slots[lineno % r->window];
        s->line = lineno;
        if (sub_blank(*buf, n)) {
            s->skip = 1;
            r->blank++;
            continue;
        }
        while (n > 0 && ((*buf)[n - 1] == '\n' || (*buf)[n - 1] == '\r')) n--;
        if (!r->detected++) r->batch = openai_batch_detect(r->format, *buf, (size_t)n);
        json_error_t je;
        rlError berr = {0};
        /* a repeated key is refused, as the worker and generate refuse it:
         * sent again as one object, the last value would silently win */
        json_t *req = r->batch ? openai_batch_request(*buf, (size_t)n, lineno, &s->batch, &berr)
                               : json_loadb(*buf, (size_t)n, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
        char auto_id[64];
        snprintf(auto_id, sizeof(auto_id), "%s-%ld", r->id_prefix, lineno);
        json_t *jid = json_object_get(req, "id");
        const char *id = json_is_string(jid) ? json_string_value(jid) : auto_id;
        /* a batch call's job: custom_id within this input's prefix (another
         * file's custom_ids may be the same); its answer is known by custom_id */
        char *line_id = r->batch && !s->batch.custom_id ? openai_batch_id(&s->batch) : NULL;
        if (r->batch && !s->batch.custom_id && !line_id) {
            json_decref(req);
            goto oom;
        }
        const char *key = r->batch ? (line_id ? line_id : s->batch.custom_id) : id;
        int answered = json_object_get(r->done_ids, key) != NULL;
        free(line_id);
        if (r->batch && s->batch.custom_id && req) {
            char *bid = malloc(strlen(r->id_prefix) + strlen(s->batch.custom_id) + 2);
            if (!bid) {
                json_decref(req);
                goto oom;
            }
            sprintf(bid, "%s-%s", r->id_prefix, s->batch.custom_id);
            json_object_set_new(req, "id", json_string(bid));
            free(bid);
            jid = json_object_get(req, "id");
            id = json_string_value(jid);
        }
        if (!(s->id = strdup(id))) {
            json_decref(req);
            goto oom;
        }
        if (answered) {
            int incomplete = !r->batch && r->tail_id && !strcmp(id, r->tail_id) && !r->tail_final &&
                             json_is_object(req) && sub_samples(req) > r->tail_lines;
            if (!incomplete) {
                s->skip = 1;
                r->skipped++;
                json_decref(req);
                continue;
            }
            if (sub_cut_tail(r, id, code)) {
                json_decref(req);
                return -1;
            }
        }
        if (r->batch && !req) {
            char msg[RL_ERROR_LEN + 32];
            snprintf(msg, sizeof(msg), "line %ld: %s", lineno, berr.msg);
            s->local = openai_batch_error(&s->batch, "invalid_request", msg);
            r->local++;
            r->errors++;
            continue;
        }
        json_t *twin = json_object_get(r->by_id, id); /* from standard input, not checked up front */
        /* a batch's custom_ids are unique (as OpenAI requires), not only
         * among the calls still running */
        json_t *earlier = r->batch ? json_object_get(r->custom_ids, s->batch.custom_id) : NULL;
        if (r->batch && !earlier) json_object_set_new(r->custom_ids, s->batch.custom_id, json_integer(lineno));
        if (earlier) {
            char msg[300];
            snprintf(msg, sizeof(msg), "line %ld has the custom_id of line %lld; give every call its own "
                     "custom_id", lineno, (long long)json_integer_value(earlier));
            s->local = openai_batch_error(&s->batch, "invalid_request", msg);
            r->local++;
            r->errors++;
            json_decref(req);
            continue;
        }
        /* The worker answers a job only under an id it can read, and refuses
         * one over RL_ID_MAX bytes; an id it cannot read gets a dead letter
         * alone, and the run would wait for its answer for ever: refuse here
         * every id the worker would refuse. */
        size_t id_len = json_string_length(jid);
        int bad_id = json_is_object(req) && jid &&
                     (!json_is_string(jid) || !id_len || id_len > RL_ID_MAX || strlen(id) != id_len);
        if (r->batch && bad_id) {
            char msg[300];
            snprintf(msg, sizeof(msg), "line %ld: custom_id is %zu bytes; at most %zu (the job's id is "
                     "\"%s-<custom_id>\", at most %d bytes)", lineno, strlen(s->batch.custom_id),
                     RL_ID_MAX - strlen(r->id_prefix) - 1, r->id_prefix, RL_ID_MAX);
            s->local = openai_batch_error(&s->batch, "invalid_request", msg);
            r->local++;
            r->errors++;
            json_decref(req);
            continue;
        }
        if (!json_is_object(req) || twin || bad_id) {
            char msg[300];
            if (bad_id)
                snprintf(msg, sizeof(msg), "input line %ld: field 'id' must be a string of 1 to %d bytes without "
                         "U+0000 (or leave it out to have one made from the line number)", lineno, RL_ID_MAX);
            else if (twin)
                snprintf(msg, sizeof(msg), "input line %ld has the id of line %lld, still running; give every "
                         "job its own id", lineno, (long long)json_integer_value(twin));
            else
                snprintf(msg, sizeof(msg), "input line %ld is not a JSON object: %s", lineno,
                         req ? "a request is an object" : je.text);
            s->local = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "event", "error", "error", "code",
                                 "invalid_request", "message", msg);
            r->local++;
            r->errors++;
            json_decref(req);
            continue;
        }
        if (!jid) json_object_set_new(req, "id", json_string(id));
        json_object_set_new(req, "reply_to", json_string(r->reply_key));
        s->n = sub_samples(req);
        s->acc = calloc((size_t)s->n, sizeof(*s->acc));
        s->attempt = 1;
        char *payload = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        if (!s->acc || !payload) {
            free(payload);
            goto oom;
        }
        json_object_set_new(r->by_id, s->id, json_integer(lineno)); /* id may point into req */
        redisAppendCommand(r->c, "XADD %s * json %s", r->stream, payload);
        s->payload = payload;
        r->submitted++;
        sent++;
    }
    return sent;
oom:
    fprintf(stderr, "redlm submit: out of memory\n");
    *code = RL_EMEMORY;
    return -1;
}

/* Send again the jobs refused as duplicate_id whose wait is over; returns
 * how many XADDs were appended. */
static int sub_retry(subRun *r) {
    int sent = 0;
    double now = now_s();
    for (long line = r->oldest; line <= r->next_line; line++) {
        subSlot *s = &r->slots[line % r->window];
        if (s->line != line || !s->retry_at || now < s->retry_at) continue;
        s->retry_at = 0;
        redisAppendCommand(r->c, "XADD %s * json %s", r->stream, s->payload);
        sent++;
    }
    return sent;
}

static int sub_loop(subRun *r) {
    char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    double last_progress = 0;
    while (!rc) {
        int sent = sub_fill(r, &buf, &cap, &rc);
        if (sent < 0) break;
        sent += sub_retry(r);
        for (int i = 0; i < sent; i++) {
            redisReply *x;
            if (redisGetReply(r->c, (void **)&x) != REDIS_OK || !x || x->type == REDIS_REPLY_ERROR) {
                if (x && !strncmp(x->str, "WRONGTYPE ", 10))
                    fprintf(stderr, "redlm submit: %s is not a stream (the key holds another type: another "
                            "program uses the name, or it is stale); DEL it, or give the pool another "
                            "--stream\n", r->stream);
                else
                    fprintf(stderr, "redlm submit: XADD %s failed: %s\n", r->stream, x ? x->str : r->c->errstr);
                if (x) freeReplyObject(x);
                rc = RL_EREDIS;
                break;
            }
            freeReplyObject(x);
        }
        if (rc || sub_flush(r)) {
            if (!rc) fprintf(stderr, "redlm submit: writing the output failed: %s\n", strerror(errno));
            rc = rc ? rc : RL_EIO;
            break;
        }
        if (r->eof && r->oldest > r->next_line) break;
        /* Lines answered without a worker (already in the output, blank,
         * refused here) made room: read on, not wait a second for replies. */
        if (!r->eof && r->next_line - r->oldest + 1 < r->window) continue;
        if (r->timeout > 0 && now_s() - r->t0 >= r->timeout) {
            sub_progress(r, 1);
            fprintf(stderr, "redlm submit: --timeout %g s reached: %ld jobs answered, %ld results written to %s, "
                            "%ld jobs unanswered (they stay queued); rerun with the same --output to go on\n",
                    r->timeout, r->answered + r->local, r->completed, r->out_name, r->submitted - r->answered);
            rc = SUB_TIMEOUT;
            break;
        }
        sub_check_workers(r);
        redisReply *x = redisCommand(r->c, "XREAD COUNT 1000 BLOCK 1000 STREAMS %s %s", r->reply_key, r->last_id);
        if (!x) {
            fprintf(stderr, "redlm submit: lost Redis (%s); rerun with the same --output to resume\n",
                    r->c->errstr);
            rc = RL_EREDIS;
            break;
        }
        if (x->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "redlm submit: XREAD %s failed: %s\n", r->reply_key, x->str);
            freeReplyObject(x);
            rc = RL_EREDIS;
            break;
        }
        if (x->type == REDIS_REPLY_ARRAY && x->elements == 1) {
            const redisReply *entries = x->element[0]->element[1];
            for (size_t i = 0; i < entries->elements; i++) {
                const redisReply *en = entries->element[i];
                snprintf(r->last_id, sizeof(r->last_id), "%s", en->element[0]->str);
                const redisReply *f = en->element[1];
                for (size_t k = 0; k + 1 < f->elements; k += 2) {
                    if (strcmp(f->element[k]->str, "json")) continue;
                    /* a generated text may hold U+0000 (the token of byte 0) */
                    json_error_t je;
                    json_t *ev = json_loadb(f->element[k + 1]->str, (size_t)f->element[k + 1]->len,
                                            JSON_ALLOW_NUL, &je);
                    if (ev) sub_event(r, ev);
                    else
                        fprintf(stderr, "redlm submit: reply entry %s in %s is not JSON (%s); ignored\n",
                                en->element[0]->str, r->reply_key, je.text);
                    json_decref(ev);
                }
            }
        }
        freeReplyObject(x);
        if (sub_flush(r)) {
            fprintf(stderr, "redlm submit: writing the output failed: %s\n", strerror(errno));
            rc = RL_EIO;
        }
        if (now_s() - last_progress > 0.2) {
            sub_progress(r, 0);
            last_progress = now_s();
        }
    }
    sub_progress(r, 1);
    free(buf);
    return rc;
}

/* The reply prefix this run's stream goes under: a worker answers only
 * under its own --reply-prefix (a job whose reply_to is elsewhere is
 * answered where this run never reads), so take the one the live workers
 * of the stream announce, or check the one given against it. */
static int sub_reply_prefix(redisContext *c, const char *stream, const char **prefix) {
    static char announced[256];
    rlInstance *v;
    int n;
    rlError err;
    if (instances_read(c, stream, &v, &n, &err)) n = 0, v = NULL;
    const char *theirs = NULL;
    for (int i = 0; i < n; i++) {
        const char *p = v[i].live ? instances_field(&v[i], "reply_prefix") : NULL;
        if (!p) continue;
        if (theirs && strcmp(theirs, p))
            fprintf(stderr, "redlm submit: the workers of %s answer under different reply prefixes ('%s', "
                    "'%s'); give --reply-prefix\n", stream, theirs, p);
        if (!theirs && strlen(p) < sizeof(announced)) theirs = strcpy(announced, p);
    }
    instances_free(v, n);
    if (*prefix && theirs && strcmp(*prefix, theirs))
        fprintf(stderr, "redlm submit: --reply-prefix '%s', but the live workers of %s answer under '%s': "
                "their answers would never arrive\n", *prefix, stream, theirs);
    if (!*prefix) *prefix = theirs ? theirs : "redlm:reply:";
    if (!**prefix || strlen(*prefix) > 256) {
        fprintf(stderr, "redlm submit: --reply-prefix must be 1 to 256 bytes\n");
        return -1;
    }
    return 0;
}

int cmd_submit(int argc, char **argv) {
    const char *url_s = NULL, *input = NULL, *output = NULL, *stream = "redlm:jobs", *format = "auto";
    const char *reply_prefix = NULL;
    int window = 256;
    double timeout = 0;
    rlFlags fs;
    flags_init(&fs, "submit",
               "usage: redlm submit --redis URL --input jobs.jsonl --output results.jsonl "
               "[options]\n\n"
               "Submits every line (a request object, worker/redis/PROTOCOL.md) as a job, at\n"
               "most --window at a time, and writes each job's done events (one per sample)\n"
               "or its error, in input order.  Restarted with the same output file, it skips\n"
               "the jobs already there.  Warns when no live worker reads the stream.\n\n");
    flags_string(&fs, "--redis", &url_s, "URL", "redis://[user:pass@]host:port[/db]")->required = 1;
    flags_string(&fs, "--input", &input, "FILE|-", "jobs, one JSON object per line")->required = 1;
    flags_string(&fs, "--output", &output, "FILE|-", "results, one JSON object per line")
        ->required = 1;
    flags_string(&fs, "--stream", &stream, "KEY", "job stream (default redlm:jobs)");
    flags_enum(&fs, "--input-format", &format, openai_batch_formats,
               "redlm requests or OpenAI Batch lines (default auto: the first line decides)");
    flags_string(&fs, "--reply-prefix", &reply_prefix, "P",
                 "the workers' --reply-prefix, under which this run's reply\n"
                 "stream is made (default: the one the live workers of\n"
                 "--stream announce, else redlm:reply:)");
    flags_int(&fs, "--window", &window, 1, 1000000, "N", "jobs outstanding at once (default 256)");
    flags_double(&fs, "--timeout", &timeout, 0, 1, 1e9, "S",
                 "give up after S seconds, saying how many results it has\n"
                 "(exit 124; a rerun with the same --output goes on)");
    int rc = flags_main(&fs, argc, argv);
    if (rc >= 0) return rc;
    subRun r = {.stream = stream, .window = window, .oldest = 1, .format = format, .timeout = timeout,
                .out_name = strcmp(output, "-") ? output : "stdout"};
    rc = 0;
    r.by_id = json_object();
    r.custom_ids = json_object();
    r.done_ids = json_object();
    r.slots = calloc((size_t)window, sizeof(*r.slots));
    rlError err;
    if (!(r.in = files_open_input(input, "--input", &err))) {
        fprintf(stderr, "redlm submit: %s\n", err.msg);
        rc = err.code;
        goto done;
    }
    if (r.in != stdin && sub_check_ids(r.in, input, format)) {
        rc = RL_EUSAGE;
        goto done;
    }
    /* The output is the run's checkpoint, appended to (not files.h's
     * temporary and rename); "-" is stdout, which cannot be read back. */
    if (!strcmp(output, "-")) r.out = stdout;
    else if (sub_resume(&r, output) || !(r.out = fopen(output, "a"))) {
        fprintf(stderr, "redlm submit: cannot use --output %s: %s\n", output, strerror(errno));
        rc = RL_EIO;
        goto done;
    }
    rlRedisUrl url;
    struct timeval tv = {10, 0};
    if (redis_url_parse(url_s, &url, &err) || !(r.c = redis_url_connect(&url, tv, &err))) {
        fprintf(stderr, "redlm submit: %s\n", err.msg);
        rc = err.code;
        goto done;
    }
    /* ids for lines without one: stable across runs of the same input file */
    char real[4096];
    const char *key = realpath(input, real) ? real : input;
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(r.id_prefix, sizeof(r.id_prefix), "job%08llx", (unsigned long long)(h & 0xffffffffULL));
    unsigned long long rnd = (unsigned long long)getpid() ^ (unsigned long long)time(NULL) << 20 ^ h;
    if (sub_reply_prefix(r.c, stream, &reply_prefix)) {
        rc = RL_EUSAGE;
        goto done;
    }
    snprintf(r.reply_key, sizeof(r.reply_key), "%ssubmit:%016llx", reply_prefix, rnd);
    /* read from the beginning of the reply stream: it is new */
    snprintf(r.last_id, sizeof(r.last_id), "0-0");
    r.tty = isatty(2);
    r.t0 = now_s();
    rc = sub_loop(&r);
    double el = now_s() - r.t0;
    fprintf(stderr, "redlm submit: %ld jobs in %.2f s (%.1f jobs/s), %ld errors, %ld already done\n",
            r.completed, el, el > 0 ? r.completed / el : 0.0, r.errors, r.skipped);
    freeReplyObject(redisCommand(r.c, "DEL %s", r.reply_key));
done:
    files_close_input(r.in);
    if (r.out && (r.out == stdout ? fflush(r.out) : fclose(r.out)) && !rc) rc = RL_EIO;
    for (int i = 0; r.slots && i < window; i++) sub_slot_clear(&r.slots[i]);
    free(r.slots);
    json_decref(r.by_id);
    json_decref(r.custom_ids);
    json_decref(r.done_ids);
    free(r.tail_id);
    redisFree(r.c);
    return rc;
}
