/* cmd_generate.c: `redlm generate`, the offline front door.
 *
 * Reads every request of a JSONL file (or one from --prompt, --messages or
 * --prompt-ids), runs them all through the engine at once (continuous
 * batching, exactly as the Redis worker does), and writes one result per
 * request and sample index in input order: the `done` event with all tokens
 * and text of that sample, or an `error` event for a line that is not a
 * valid request (the rest still run).  Results are written as soon as every
 * earlier line is complete.  For one-off use, --prompt / --messages print
 * just the text as it is generated. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/commands.h"
#include "worker/engine/engine.h"
#include "worker/engine/engine_flags.h"
#include "worker/engine/layout.h"
#include "worker/engine/output.h"
#include "worker/lib/files.h"
#include "worker/lib/flags.h"
#include "worker/lib/interrupt.h"
#include "worker/lib/now.h"
#include "worker/request/openai_batch.h"
#include "worker/request/request_decode.h"

/* One input line's results, kept until every earlier line is written. */
typedef struct genLine {
    json_t **events;    /* [n] by sample index */
    int n, got;
} genLine;

typedef struct genRun {
    genLine *lines;
    int n_lines, next_write, n_done;
    FILE *out;
    int progress;
    int failed;         /* writing failed */
    rlBatchLine *batch; /* [n_lines] for an OpenAI Batch file, else NULL */
    long *line_no;      /* [n_lines]: each line's number in the file (blank lines are skipped) */
    int name_lines;     /* --input of redlm requests: every error says "line N: " first */
    int text;           /* --prompt / --messages to a terminal or pipe: the text as it comes */
    char *error;        /* text mode: the request's error, "code: message" */
} genRun;

/* SIGINT / SIGTERM: stop after the current step and keep what is done. */
static volatile sig_atomic_t gen_signal;
static void gen_on_signal(int sig) { gen_signal = sig; }

/* A line's results as written: each sample's event, or one OpenAI Batch line. */
static int gen_write_line(genRun *g, int i, genLine *l) {
    if (g->batch) {
        json_t *v = openai_batch_response(&g->batch[i], l->events, l->n);
        int bad = !v || json_dumpf(v, g->out, JSON_COMPACT) || fputc('\n', g->out) == EOF;
        json_decref(v);
        return bad;
    }
    for (int k = 0; k < l->n; k++)
        if (json_dumpf(l->events[k], g->out, JSON_COMPACT) || fputc('\n', g->out) == EOF) return 1;
    return 0;
}

static void gen_write_ready(genRun *g) {
    /* n is 0 until the line is read: a later line is never "complete" early. */
    while (g->next_write < g->n_lines && g->lines[g->next_write].n > 0 &&
           g->lines[g->next_write].got == g->lines[g->next_write].n) {
        genLine *l = &g->lines[g->next_write];
        if (gen_write_line(g, g->next_write++, l)) g->failed = 1;
        for (int i = 0; i < l->n; i++) json_decref(l->events[i]);
        free(l->events);
        l->events = NULL;
    }
}

static void gen_progress(genRun *g, rlEngine *e, double t0, int final) {
    rlEngineStats st;
    engine_stats(e, &st);
    double el = now_s() - t0;
    fprintf(stderr, "\r%d/%d requests done, %d running, %llu tokens, %.0f tokens/s   %s", g->n_done, g->n_lines,
            st.running, (unsigned long long)st.generation_tokens, el > 0 ? st.generation_tokens / el : 0.0,
            final ? "\n" : "");
}

static void gen_put(genRun *g, int line, int index, json_t *ev) {
    genLine *l = &g->lines[line];
    if (!l->events && !(l->events = calloc((size_t)l->n, sizeof(json_t *)))) {
        json_decref(ev);
        g->failed = 1;
        return;
    }
    if (!ev) ev = json_pack("{s:s, s:{s:s, s:s}}", "event", "error", "error", "code",
                            "internal", "message", "out of memory building the result");
    l->events[index] = ev;
    if (++l->got == l->n) g->n_done++;
    gen_write_ready(g);
}

/* Text mode: one request, streamed; its error is kept for stderr. */
static void gen_output_text(genRun *g, const rlOutput *out) {
    if (out->kind == RL_OUT_ERROR) {
        char msg[RL_ERROR_LEN];
        snprintf(msg, sizeof(msg), "%s: %s", out->error_code, out->error_message);
        free(g->error);
        if (!(g->error = strdup(msg))) g->failed = 1;
        g->n_done++;
        return;
    }
    if (out->text_len && fwrite(out->text, 1, out->text_len, g->out) != out->text_len) g->failed = 1;
    if (out->kind == RL_OUT_DONE) {
        if (fputc('\n', g->out) == EOF) g->failed = 1;
        g->n_done++;
    }
    if (fflush(g->out)) g->failed = 1;
}

static void gen_output(void *ctx, const rlOutput *out) {
    genRun *g = ctx;
    if (g->text) {
        gen_output_text(g, out);
        return;
    }
    if (out->kind == RL_OUT_CHUNK) return;
    int line = (int)(intptr_t)out->req->user;
    genLine *l = &g->lines[line];
    if (out->kind == RL_OUT_ERROR) {
        /* An error answers the whole request, whatever its n; the parser's
         * refusals and the engine's (n over --max-num-seqs, a prompt too
         * long) name the line alike. */
        for (int i = 0; l->events && i < l->n; i++) json_decref(l->events[i]), l->events[i] = NULL;
        l->n = 1;
        l->got = 0;
        char msg[RL_ERROR_LEN + 32];
        rlOutput named = *out;
        if (g->name_lines) {
            snprintf(msg, sizeof(msg), "line %ld: %s", g->line_no[line], out->error_message);
            named.error_message = msg;
        }
        gen_put(g, line, 0, output_event(&named, OUTPUT_OFFLINE));
        return;
    }
    gen_put(g, line, out->index, output_event(out, OUTPUT_OFFLINE));
}

/* An error result for a line that never became a request. */
static void gen_line_error(genRun *g, int line, const char *id, const char *code, const char *msg) {
    rlRequest r;
    request_init(&r);
    r.id = (char *)id;
    r.user = (void *)(intptr_t)line;
    rlOutput o = {.kind = RL_OUT_ERROR, .req = &r, .error_code = code, .error_message = msg};
    gen_output(g, &o);
}

/* The lines of path ("-": stdin) that are not blank, and their numbers in
 * it (messages name the line a producer sees in an editor). */
static int gen_read_lines(const char *path, char ***lines, long **nos, int *n, rlError *err) {
    FILE *f = files_open_input(path, "--input", err);
    if (!f) return -1;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    int cap_lines = 0;
    long lineno = 0;
    while ((len = getline(&buf, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = 0;
        if (len == 0) continue;
        if (*n == cap_lines) {
            cap_lines = cap_lines ? cap_lines * 2 : 64;
            char **p = realloc(*lines, (size_t)cap_lines * sizeof(char *));
            if (p) *lines = p;
            long *q = p ? realloc(*nos, (size_t)cap_lines * sizeof(long)) : NULL;
            if (!q) break;
            *nos = q;
        }
        if (!((*lines)[*n] = strdup(buf))) break;
        (*nos)[(*n)++] = lineno;
    }
    int bad = ferror(f) || !feof(f);
    free(buf);
    files_close_input(f);
    if (bad) return rl_error(err, RL_EIO, "reading --input %s failed (or out of memory)", path);
    return 0;
}

/* An OpenAI Batch file whose custom_ids repeat is refused whole, as OpenAI
 * and `redlm submit` refuse it: two answers with one custom_id cannot be
 * told apart. */
static int gen_check_custom_ids(char **lines, const long *nos, int n, const char *path, rlError *err) {
    json_t *seen = json_object();
    char id[201];
    long dups = 0, first = 0, line = 0;
    for (int i = 0; seen && i < n; i++) {
        long f = openai_batch_repeat(seen, lines[i], strlen(lines[i]), nos[i], 1, id, sizeof(id));
        if (f && dups++ < 10) fprintf(stderr, "redlm generate: %s: line %ld has the custom_id '%s' of line %ld\n",
                                      path, nos[i], id, f);
        if (f && !first) first = f, line = nos[i];
    }
    json_decref(seen);
    if (!seen) return rl_error(err, RL_EINTERNAL, "out of memory");
    if (!dups) return 0;
    return rl_error(err, RL_EUSAGE, "%ld lines of %s repeat an earlier line's custom_id (line %ld that of "
                    "line %ld); nothing run: give every call its own custom_id", dups, path, line, first);
}

/* The one greedy request of --prompt, --messages or --prompt-ids, as a
 * JSON line like those of --input. */
static char *gen_one_line(const char *prompt, const char *messages, const int *ids, int n, int max_tokens,
                          rlError *err) {
    json_t *req = json_pack("{s:s, s:i, s:f}", "id", "prompt", "max_tokens", max_tokens, "temperature", 0.0);
    if (!req) goto oom;
    if (prompt) {
        if (json_object_set_new(req, "prompt", json_string(prompt))) {
            json_decref(req);
            rl_error(err, RL_EUSAGE, "--prompt is not valid UTF-8");
            return NULL;
        }
    } else if (messages) {
        json_error_t je;
        json_t *m = json_loads(messages, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_array(m)) {
            json_decref(m);
            json_decref(req);
            rl_error(err, RL_EUSAGE, "--messages wants a JSON array of {\"role\", \"content\"} objects%s%s",
                     m ? "" : ": ", m ? "" : je.text);
            return NULL;
        }
        json_object_set_new(req, "messages", m);
    } else {
        json_t *arr = json_array();
        for (int i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
        if (json_object_set_new(req, "prompt_ids", arr)) goto oom;
    }
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (s) return s;
oom:
    json_decref(req);
    rl_error(err, RL_EINTERNAL, "out of memory");
    return NULL;
}

/* Turn line i into an engine request, or an error result: through
 * request_decode, as the Redis worker decodes a json entry. */
static int gen_submit(genRun *g, rlEngine *e, const char *text, int i, rlError *err) {
    char *mapped = NULL;
    if (g->batch) {
        /* an OpenAI Batch call runs as our request named by its custom_id */
        rlError berr = {0};
        json_t *req = openai_batch_request(text, strlen(text), g->line_no[i], &g->batch[i], &berr);
        if (req) json_object_set_new(req, "id", json_string(g->batch[i].custom_id));
        if (!req || !(text = mapped = json_dumps(req, JSON_COMPACT))) {
            char msg[RL_ERROR_LEN + 32];
            snprintf(msg, sizeof(msg), "line %ld: %s", g->line_no[i], req ? "out of memory" : berr.msg);
            gen_line_error(g, i, NULL, req ? "internal" : "invalid_request", msg);
            json_decref(req);
            return 0;
        }
        json_decref(req);
    }
    rlDecoded d;
    rlRequest *r = request_decode(RL_ENC_JSON, text, strlen(text), &d);
    free(mapped);
    if (!r) {
        gen_line_error(g, i, d.id, d.code, d.err.msg);
        request_decoded_free(&d);
        return 0;
    }
    request_decoded_free(&d);
    r->stream = g->text;        /* else one result with everything per sample */
    r->user = (void *)(intptr_t)i;
    g->lines[i].n = r->n;
    return engine_add(e, r, err);
}

int cmd_generate(int argc, char **argv) {
    rlEngineFlags flags;
    engine_flags_init(&flags);
    rlEngineOptions *o = &flags.o;
    o->offline = 1;
    const char *input = "-", *output = "-", *format = "auto", *prompt = NULL, *messages = NULL;
    int max_tokens = 16, stats = 0, n_ids = 0;
    /* one argument holds at most 128 KiB (MAX_ARG_STRLEN): 64 Ki ids */
    enum { GEN_MAX_IDS = 1 << 16 };
    int *ids = malloc(GEN_MAX_IDS * sizeof(int));
    if (!ids) {
        fprintf(stderr, "redlm generate: out of memory\n");
        return RL_EINTERNAL;
    }
    rlError err = {0};
    rlFlags fs;
    flags_init(&fs, "generate", "usage: redlm generate --model DIR [options]\n");
    flags_string(&fs, "--input", &input, "FILE|-",
                 "requests, one JSON object per line (default -)");
    flags_string(&fs, "--output", &output, "FILE|-",
                 "results, one JSON object per line (default -)");
    flags_enum(&fs, "--input-format", &format, openai_batch_formats,
               "redlm requests or OpenAI Batch lines (default auto: the first line decides)");
    flags_string(&fs, "--prompt", &prompt, "TEXT",
                 "one greedy request from text instead of --input; prints its text as it\n"
                 "is generated (its JSON result with --output)");
    flags_string(&fs, "--messages", &messages, "JSON",
                 "the same from a chat: '[{\"role\": \"user\", \"content\": \"Hi\"}]'");
    flags_list(&fs, "--prompt-ids", ids, GEN_MAX_IDS, &n_ids, 0, INT32_MAX, 0, "1,2,3",
               "one greedy request from token ids instead of --input (JSON result)");
    flags_int(&fs, "--max-tokens", &max_tokens, 0, INT32_MAX, "N",
              "tokens to generate for --prompt-ids, --prompt or --messages (default 16)");
    flags_bool(&fs, "--stats", &stats, "scheduler counters to stderr at the end")->aliases =
        "--verbose";
    flags_section(&fs, "engine:");
    engine_flags_add(&fs, &flags);
    static const char *const one[] = {"--prompt-ids", "--prompt", "--messages", "--input"};
    for (int a = 0; a < 4; a++)
        for (int b = a + 1; b < 4; b++) flags_conflict(&fs, one[a], one[b]);
    int rc = flags_main(&fs, argc, argv);
    int one_off = n_ids || prompt || messages;
    if (rc < 0 && flags_given(&fs, "--max-tokens") && !one_off) {
        fprintf(stderr, "redlm generate: --max-tokens only applies together with --prompt-ids, --prompt or "
                        "--messages\n");
        rc = RL_EUSAGE;
    }
    if (rc >= 0) {
        free(ids);
        return rc;
    }
    engine_flags_finish(&flags);
    char **lines = NULL;
    int n_lines = 0;
    genRun g = {0};
    rlEngine *e = NULL;
    rlOutFile out = {0};
    int status = 0;
    /* --prompt / --messages without --output: the text itself, not JSON */
    g.text = (prompt || messages) && !flags_given(&fs, "--output");
    if (one_off) {
        lines = malloc(sizeof(char *));
        g.line_no = malloc(sizeof(long));
        if (!lines || !g.line_no || !(lines[0] = gen_one_line(prompt, messages, ids, n_ids, max_tokens, &err)))
            goto done;
        g.line_no[0] = n_lines = 1;
    } else if (gen_read_lines(input, &lines, &g.line_no, &n_lines, &err)) {
        goto done;
    }
    int batch = openai_batch_detect(format, n_lines ? lines[0] : NULL, n_lines ? strlen(lines[0]) : 0);
    /* a batch call's body is refused in the worker's words, as submit writes
     * it; --prompt and the like have no line to name */
    g.name_lines = !batch && !one_off;
    if (batch && gen_check_custom_ids(lines, g.line_no, n_lines, input, &err)) goto done;
    /* a temporary name until the run is complete: a failed or killed run
     * leaves an older --output as it was */
    if (files_open_output(&out, output, "--output", &err)) goto done;
    g.out = out.f;
    char kept[4200] = "nothing was run";
    if (strcmp(output, "-"))
        snprintf(kept, sizeof kept, "nothing was run; %s is left as it was", output);
    interrupt_at_start("generate", out.tmp, kept);
    g.progress = isatty(2) && !g.text;
    g.n_lines = n_lines;
    if (!(g.lines = calloc((size_t)(n_lines ? n_lines : 1), sizeof(genLine)))) {
        rl_error(&err, RL_EINTERNAL, "out of memory");
        goto done;
    }
    if (batch && !(g.batch = calloc((size_t)(n_lines ? n_lines : 1), sizeof(rlBatchLine)))) {
        rl_error(&err, RL_EINTERNAL, "out of memory");
        goto done;
    }
    if (!(e = engine_open(o, &err))) goto done;
    /* Loaded: from here a signal stops the run after the current step. */
    struct sigaction sa = {.sa_handler = gen_on_signal, .sa_flags = SA_RESETHAND}; /* a second one kills */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    double t0 = now_s(), next_progress = 0;
    for (int i = 0; i < n_lines && !gen_signal; i++)
        if (gen_submit(&g, e, lines[i], i, &err)) goto done;
    int steps = 0;
    while (engine_has_work(e) && !gen_signal) {
        if (engine_step(e, gen_output, &g, &err)) goto done;
        steps++;
        if (g.progress && now_s() >= next_progress) {
            gen_progress(&g, e, t0, 0);
            next_progress = now_s() + 0.2;
        }
    }
    double secs = now_s() - t0;
    if (g.progress) gen_progress(&g, e, t0, 1);
    if (g.failed) {
        rl_error(&err, RL_EIO, "writing --output %s failed", output);
        goto done;
    }
    if (gen_signal) {
        char where[4200];
        if (files_keep_partial(&out, where, sizeof(where), &err)) goto done;
        /* results are written in input order: one finished after an unfinished one is not kept */
        fprintf(stderr, "redlm generate: interrupted (%s): kept the results of the first %d of %d requests "
                        "(%d had finished) %s %s", gen_signal == SIGINT ? "SIGINT" : "SIGTERM", g.next_write,
                n_lines, g.n_done, strcmp(output, "-") ? "in" : "on", where);
        if (strcmp(output, "-")) fprintf(stderr, "; %s is left as it was", output);
        fputc('\n', stderr);
        status = 128 + gen_signal;
        goto done;
    }
    if (files_commit_output(&out, &err)) goto done;
    if (g.error) {
        rl_error(&err, RL_EINPUT, "%s", g.error);
        goto done;
    }
    if (stats) {
        rlEngineStats st;
        engine_stats(e, &st);
        fprintf(stderr,
                "stats: requests=%d steps=%d seconds=%.3f generated_tokens=%llu "
                "prompt_tokens_computed=%llu preemptions=%d prefix_hit_tokens=%llu "
                "prefix_query_tokens=%llu kv_blocks_total=%d kv_blocks_cached=%d "
                "max_steps_in_flight=%d model_seconds=%.3f\n",
                n_lines, steps, secs, (unsigned long long)st.generation_tokens,
                (unsigned long long)st.prompt_tokens, st.preempted,
                (unsigned long long)st.prefix_hit_tokens,
                (unsigned long long)st.prefix_query_tokens, st.kv_blocks_total,
                st.kv_blocks_cached, st.max_steps_in_flight, st.model_seconds);
    }
done:
    engine_close(e);
    for (int i = 0; i < n_lines; i++) {
        free(lines[i]);
        if (g.lines)
            for (int k = 0; g.lines[i].events && k < g.lines[i].n; k++) json_decref(g.lines[i].events[k]);
        if (g.lines) free(g.lines[i].events);
        if (g.batch) openai_batch_line_free(&g.batch[i]);
    }
    free(g.batch);
    free(g.line_no);
    free(lines);
    free(ids);
    free(g.lines);
    free(g.error);
    files_discard_output(&out); /* unless committed or kept */
    if (err.code) {
        fprintf(stderr, "redlm generate: %s\n", err.msg);
        return err.code;
    }
    return status;
}
