/* cmd_tokenize.c: `redlm tokenize` and `redlm detokenize`, JSONL in and out,
 * for checking redlm's tokenizer against Hugging Face's and for scripts
 * that need ids without running a model.
 *
 *   redlm tokenize   (--model DIR | --tokenizer FILE) [--input F] [--output F] [--bench N]
 *   redlm detokenize (--model DIR | --tokenizer FILE) [--input F] [--output F]
 *
 * A tokenize line with "messages" (and optionally "tools",
 * "add_generation_prompt" (default true), "continue_final_message",
 * "enable_thinking", "chat_template_kwargs") is rendered with the chat template beside the
 * tokenizer first and answered {"text", "ids"}, so a template's rendering
 * can be checked against transformers' apply_chat_template.
 *
 * --bench N encodes every text N times on this thread after one warm-up
 * pass and prints throughput instead of ids, so file I/O and JSON do not
 * count, and the best of five loads of the tokenizer. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/chat/chat.h"
#include "worker/commands.h"
#include "worker/lib/bytebuf.h"
#include "worker/lib/flags.h"
#include "worker/lib/files.h"
#include "worker/tokenizer/tokenizer.h"
#include "worker/lib/now.h"
#include "worker/request/request.h"

typedef struct tokArgs {
    const char *model, *tokenizer, *input, *output;
    int bench;
} tokArgs;

/* Returns -1 to continue, else an exit status. */
static int tok_parse_args(int argc, char **argv, tokArgs *a) {
    const char *cmd = argv[0];
    int detok = !strcmp(cmd, "detokenize");
    memset(a, 0, sizeof(*a));
    rlFlags fs;
    flags_init(&fs, cmd, detok ? "usage: redlm detokenize (--model DIR | --tokenizer FILE) [options]\n"
                               "  reads JSONL {\"ids\": [...]} per line, writes {\"text\": ...} per "
                               "line, in order\n"
                             : "usage: redlm tokenize (--model DIR | --tokenizer FILE) [options]\n"
                               "  reads JSONL {\"text\": ...} per line, writes {\"ids\": [...]} per "
                               "line, in order;\n"
                               "  a line {\"messages\", \"tools\", \"add_generation_prompt\", "
                               "\"continue_final_message\",\n  \"enable_thinking\"} is rendered with the chat "
                               "template beside the tokenizer: {\"text\", \"ids\"}\n");
    flags_string(&fs, "--model", &a->model, "DIR", "use DIR/tokenizer.json");
    flags_string(&fs, "--tokenizer", &a->tokenizer, "FILE", "a Hugging Face tokenizer.json");
    flags_string(&fs, "--input", &a->input, "FILE|-", "input file (default -: stdin)");
    flags_string(&fs, "--output", &a->output, "FILE|-", "output file (default -: stdout)");
    if (!detok)
        flags_int(&fs, "--bench", &a->bench, 1, 1000000, "N",
                  "encode all texts N times, print bytes/s and tokens/s");
    flags_conflict(&fs, "--model", "--tokenizer");
    int rc = flags_main(&fs, argc, argv);
    if (rc >= 0) return rc;
    if (!a->model && !a->tokenizer) {
        fprintf(stderr, "redlm %s: give exactly one of --model DIR or --tokenizer FILE\n", cmd);
        return RL_EUSAGE;
    }
    return -1;
}

static rlTokenizer *tok_open(const tokArgs *a, rlError *err) {
    if (a->tokenizer) return tokenizer_load(a->tokenizer, err);
    bytebuf path = {0};
    if (bytebuf_append(&path, a->model, strlen(a->model)) ||
        bytebuf_append(&path, "/tokenizer.json", 15)) {
        bytebuf_free(&path);
        rl_error(err, RL_EMEMORY, "out of memory");
        return NULL;
    }
    rlTokenizer *t = tokenizer_load(path.data, err);
    bytebuf_free(&path);
    return t;
}

typedef struct tokIO {
    FILE *in, *out;
    rlOutFile file;             /* out, under a temporary name until the end */
    const char *in_name;
} tokIO;

static int tok_open_io(const tokArgs *a, tokIO *io, rlError *err) {
    io->in_name = a->input && strcmp(a->input, "-") ? a->input : "stdin";
    if (!(io->in = files_open_input(a->input ? a->input : "-", "--input", err)) ||
        files_open_output(&io->file, a->output ? a->output : "-", "--output", err))
        return -1;
    io->out = io->file.f;
    return 0;
}

/* The output replaces an older file only when everything went well. */
static void tok_close_io(tokIO *io, rlError *err) {
    files_close_input(io->in);
    if (io->out && err->code == RL_OK) files_commit_output(&io->file, err);
    files_discard_output(&io->file);
}

/* One JSONL line as an object; NULL for a blank line (err untouched) or
 * a bad one (err set). */
static json_t *tok_line_object(const char *line, size_t len, rlError *err) {
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", line[i])) i++;
    if (i == len) return NULL;
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        rl_error(err, RL_EINPUT, "not a JSON object: %s", o ? "another JSON value" : je.text);
        return NULL;
    }
    return o;
}

/* "ids": [...] of text, appended to out. */
static int tok_write_ids(const rlTokenizer *t, const char *text, size_t len, bytebuf *out, rlError *err) {
    int32_t *ids;
    int n_ids;
    if (tokenizer_encode(t, text, len, &ids, &n_ids, err)) return -1;
    int bad = bytebuf_append(out, "\"ids\": [", 8);
    for (int k = 0; k < n_ids && !bad; k++) {
        char num[16];
        int w = snprintf(num, sizeof(num), k ? ", %d" : "%d", ids[k]);
        bad = bytebuf_append(out, num, (size_t)w);
    }
    free(ids);
    if (bad || bytebuf_putc(out, ']')) return rl_error(err, RL_EMEMORY, "out of memory");
    return 0;
}

/* {"text"} -> {"ids"}, appended to out. */
static int tok_encode_line(const rlTokenizer *t, json_t *o, bytebuf *out, rlError *err) {
    json_t *s = json_object_get(o, "text");
    if (!json_is_string(s)) return rl_error(err, RL_EINPUT, "needs \"text\": a string (or \"messages\")");
    if (bytebuf_putc(out, '{') || tok_write_ids(t, json_string_value(s), json_string_length(s), out, err) ||
        bytebuf_append(out, "}\n", 2))
        return err->code != RL_OK ? -1 : rl_error(err, RL_EMEMORY, "out of memory");
    return 0;
}

/* {"messages", ...} -> {"text", "ids"}: the chat template's rendering.  The
 * chat fields are checked as a job's are (request_parse), so a line renders
 * here exactly when a worker would render it. */
static int tok_chat_line(const rlTokenizer *t, const rlChat *ch, json_t *o, bytebuf *out, rlError *err) {
    static const char *const chat_keys[] = {"messages", "tools", "add_generation_prompt", "chat_template_kwargs",
                                            "continue_final_message", NULL};
    json_t *job = json_pack("{s:s}", "id", "tokenize");
    for (const char *const *k = chat_keys; job && *k; k++) {
        json_t *v = json_object_get(o, *k);
        if (v && json_object_set_new(job, *k, json_deep_copy(v))) json_decref(job), job = NULL;
    }
    /* enable_thinking: a shorthand for chat_template_kwargs' */
    const json_t *thinking = json_object_get(o, "enable_thinking");
    if (job && thinking && !json_is_null(thinking)) {
        json_t *kw = json_object_get(job, "chat_template_kwargs");
        if (!kw || json_is_null(kw)) {
            kw = json_object();
            if (json_object_set_new(job, "chat_template_kwargs", kw)) kw = NULL;
        }
        if (!kw || (json_is_object(kw) && json_object_set(kw, "enable_thinking", (json_t *)thinking)))
            json_decref(job), job = NULL;
    }
    if (!job) return rl_error(err, RL_EMEMORY, "out of memory");
    rlRequest r;
    request_init(&r);
    const char *code;
    int rc = request_parse(&r, job, &code, err);
    json_decref(job);
    json_t *kwargs = rc ? NULL : r.chat_template_kwargs ? json_incref(r.chat_template_kwargs) : json_object();
    if (!rc && !kwargs) rc = rl_error(err, RL_EMEMORY, "out of memory");
    char *text = NULL;
    size_t len;
    if (!rc) rc = chat_render(ch, r.messages, r.tools, r.add_generation_prompt, kwargs, &text, &len, err);
    if (!rc && r.continue_final_message) rc = chat_continue_final(r.messages, text, &len, err);
    json_decref(kwargs);
    request_free(&r);
    if (rc) return -1;
    json_t *js = json_stringn_nocheck(text, len);
    char *dump = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(js);
    rc = !dump || bytebuf_append(out, "{\"text\": ", 9) || bytebuf_append(out, dump, strlen(dump)) ||
         bytebuf_append(out, ", ", 2);
    free(dump);
    if (rc) {
        free(text);
        return rl_error(err, RL_EMEMORY, "out of memory");
    }
    rc = tok_write_ids(t, text, len, out, err);
    free(text);
    if (rc) return -1;
    return bytebuf_append(out, "}\n", 2) ? rl_error(err, RL_EMEMORY, "out of memory") : 0;
}

/* The chat template beside the tokenizer, read at the first "messages" line. */
static rlChat *tok_chat(const tokArgs *a, rlChat **ch, rlError *err) {
    if (*ch) return *ch;
    if (a->model) return *ch = chat_open(a->model, err);
    const char *slash = strrchr(a->tokenizer, '/');
    char dir[4096];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - a->tokenizer) : 1, slash ? a->tokenizer : ".");
    if (slash == a->tokenizer) snprintf(dir, sizeof(dir), "/");
    return *ch = chat_open(dir, err);
}

/* {"ids"} -> {"text"}, appended to out. */
static int tok_decode_line(const rlTokenizer *t, json_t *o, bytebuf *out, rlError *err) {
    json_t *ids = json_object_get(o, "ids"), *v;
    if (!json_is_array(ids)) return rl_error(err, RL_EINPUT, "needs \"ids\": an array of token ids");
    size_t k, n = json_array_size(ids);
    int32_t *buf = malloc((n ? n : 1) * sizeof(*buf));
    if (!buf) return rl_error(err, RL_EMEMORY, "out of memory");
    /* An id past the vocabulary is refused, not decoded to nothing: a wrong
     * tokenizer for these ids must not look like an empty text. */
    int vocab = tokenizer_vocab_size(t);
    json_array_foreach(ids, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            free(buf);
            if (json_is_integer(v))
                return rl_error(err, RL_EINPUT, "ids[%zu] = %lld is not a token id of this tokenizer (0..%d)",
                                k, (long long)json_integer_value(v), vocab - 1);
            return rl_error(err, RL_EINPUT, "ids[%zu] is not a token id (an integer 0..%d)", k, vocab - 1);
        }
        buf[k] = (int32_t)json_integer_value(v);
    }
    char *text = NULL;
    size_t len;
    int rc = tokenizer_decode(t, buf, (int)n, &text, &len, err);
    free(buf);
    if (rc) return -1;
    json_t *js = json_stringn_nocheck(text, len);
    char *dump = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    free(text);
    json_decref(js);
    rc = !dump || bytebuf_append(out, "{\"text\": ", 9) || bytebuf_append(out, dump, strlen(dump)) ||
         bytebuf_append(out, "}\n", 2);
    free(dump);
    return rc ? rl_error(err, RL_EMEMORY, "out of memory") : 0;
}

static int tok_bench(const rlTokenizer *t, json_t *texts, int repeat, double load_s, double load_cpu_s,
                     FILE *out, rlError *err) {
    size_t n = json_array_size(texts), bytes = 0;
    long long tokens = 0;
    double t0 = 0, c0 = 0;
    for (int r = -1; r < repeat; r++) {   /* r = -1: the warm-up pass */
        if (r == 0) {
            t0 = now_s();
            c0 = now_thread_cpu_s();
        }
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(texts, i);
            int32_t *ids;
            int n_ids;
            if (tokenizer_encode(t, json_string_value(s), json_string_length(s), &ids, &n_ids, err)) return -1;
            free(ids);
            if (r >= 0) {
                tokens += n_ids;
                bytes += json_string_length(s);
            }
        }
    }
    /* Wall time is what the peer reports; CPU time tells a busy machine's
     * effect apart. */
    double dt = now_s() - t0, dc = now_thread_cpu_s() - c0;
    fprintf(out, "{\"tool\": \"redlm\", \"bytes_per_s\": %.0f, \"tokens_per_s\": %.0f, \"load_s\": %.3f, "
                 "\"cpu_bytes_per_s\": %.0f, \"load_cpu_s\": %.3f, \"texts\": %zu, \"repeat\": %d}\n",
            (double)bytes / dt, (double)tokens / dt, load_s, (double)bytes / dc, load_cpu_s, n, repeat);
    return 0;
}

static int tok_run(int argc, char **argv, int detok) {
    tokArgs a;
    int rc = tok_parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    rlError err = {0};
    tokIO io = {0};
    json_t *texts = json_array();   /* --bench: every text, kept for the timed passes */
    bytebuf out = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    double t0 = now_s(), c0 = now_thread_cpu_s();
    rlChat *chat = NULL;
    rlTokenizer *t = tok_open(&a, &err);
    double load_s = now_s() - t0, load_cpu_s = now_thread_cpu_s() - c0;
    if (!t || tok_open_io(&a, &io, &err)) goto done;
    /* Line by line, so any size of input runs in constant memory. */
    while ((n = getline(&line, &cap, io.in)) >= 0) {
        lineno++;
        json_t *o = tok_line_object(line, (size_t)n, &err);
        if (!o && err.code == RL_OK) continue;
        bytebuf_clear(&out);
        if (o && a.bench) {
            json_t *s = json_object_get(o, "text");
            rc = json_is_string(s) ? json_array_append(texts, s) : rl_error(&err, RL_EINPUT, "needs \"text\": a string");
        } else if (o) {
            if (detok) rc = tok_decode_line(t, o, &out, &err);
            else if (!json_object_get(o, "messages")) rc = tok_encode_line(t, o, &out, &err);
            else rc = tok_chat(&a, &chat, &err) ? tok_chat_line(t, chat, o, &out, &err) : -1;
        }
        json_decref(o);
        if (!o || rc) {
            rl_error_wrap(&err, "%s line %ld", io.in_name, lineno);
            goto done;
        }
        fwrite(out.data ? out.data : "", 1, out.len, io.out);
    }
    if (ferror(io.in)) {
        rl_error(&err, RL_EIO, "reading %s failed", io.in_name);
        goto done;
    }
    if (a.bench) {
        /* Loading, best of five: the first load of a process also pays for
         * page faults that a long-running worker pays once. */
        for (int k = 0; k < 4 && err.code == RL_OK; k++) {
            double l0 = now_s(), lc0 = now_thread_cpu_s();
            rlTokenizer *again = tok_open(&a, &err);
            double l = now_s() - l0, lc = now_thread_cpu_s() - lc0;
            tokenizer_free(again);
            if (l < load_s) load_s = l;
            if (lc < load_cpu_s) load_cpu_s = lc;
        }
        if (err.code == RL_OK) tok_bench(t, texts, a.bench, load_s, load_cpu_s, io.out, &err);
    }
done:
    tok_close_io(&io, &err);
    free(line);
    bytebuf_free(&out);
    json_decref(texts);
    tokenizer_free(t);
    chat_free(chat);
    if (err.code != RL_OK) {
        fprintf(stderr, "redlm %s: %s\n", argv[0], err.msg);
        return (int)err.code;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    return tok_run(argc, argv, 0);
}

int cmd_detokenize(int argc, char **argv) {
    return tok_run(argc, argv, 1);
}
