/* test_tokenizer.c: the tokenizer against Hugging Face's own outputs.
 *
 * Fixtures (tests/fixtures/tokenizer-small, build/fixtures/tokenizer-qwen)
 * hold texts with the ids `tokenizers` gave and id lists with the text it
 * decoded; every one must match exactly, through the library and through
 * `redlm tokenize` / `redlm detokenize`.  Then streaming, stop strings,
 * megabyte inputs, invalid UTF-8 and refused tokenizer.json parts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/tokenizer/pretok.h"
#include "worker/engine/prompt.h"
#include "worker/lib/utf8.h"

static char *fixture(const char *env, const char *fallback, const char *rel) {
    const char *dir = getenv(env);
    static char path[4][1024];
    static int slot;
    char *p = path[slot++ % 4];
    snprintf(p, sizeof(path[0]), "%s/%s", dir ? dir : fallback, rel);
    return p;
}
#define SMALL(f) fixture("FIXTURES", "build/fixtures", "tokenizer-small/" f)
#define QWEN(f) fixture("FIXTURES", "build/fixtures", "tokenizer-qwen/" f)

static rlTokenizer *load_or_fail(const char *path) {
    rlError err = {0};
    rlTokenizer *t = tokenizer_load(path, &err);
    if (!t) fail_msg("%s", err.msg);
    return t;
}

/* Loaded once for the whole run (the Qwen one takes a few tenths of a
 * second); the tests that load files themselves check loading. */
static rlTokenizer *qwen, *small;

static int setup(void **state) {
    (void)state;
    qwen = load_or_fail(QWEN("tokenizer.json"));
    small = load_or_fail(SMALL("tokenizer.json"));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tokenizer_free(qwen);
    tokenizer_free(small);
    return 0;
}

static json_t *read_jsonl(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run `make fixtures`)", path);
    json_t *all = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        if (!o) fail_msg("%s: %s", path, je.text);
        json_array_append_new(all, o);
    }
    free(line);
    fclose(f);
    return all;
}

static int32_t *json_ids(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int32_t *v = malloc(((size_t)*n + 1) * sizeof(*v));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

static void check_ids(json_t *want, const int32_t *got, int n, int line) {
    int ok = (size_t)n == json_array_size(want);
    for (int i = 0; ok && i < n; i++) ok = got[i] == json_integer_value(json_array_get(want, (size_t)i));
    if (!ok) fail_msg("line %d: ids differ (%d ids, expected %zu)", line, n, json_array_size(want));
}

static void check_text(json_t *want, const char *got, size_t len, int line) {
    if (json_string_length(want) != len || memcmp(json_string_value(want), got, len))
        fail_msg("line %d: text differs:\n got  %.*s\n want %s", line, (int)len, got, json_string_value(want));
}

/* encode.jsonl: text -> ids, and ids -> decoded. */
static void check_encode_file(const rlTokenizer *t, const char *path) {
    json_t *all = read_jsonl(path), *o;
    size_t i;
    json_array_foreach(all, i, o) {
        json_t *text = json_object_get(o, "text");
        int32_t *ids;
        int n;
        rlError err = {0};
        if (tokenizer_encode(t, json_string_value(text), json_string_length(text), &ids, &n, &err))
            fail_msg("line %zu: %s", i + 1, err.msg);
        check_ids(json_object_get(o, "ids"), ids, n, (int)i + 1);
        char *dec;
        size_t len;
        assert_int_equal(tokenizer_decode(t, ids, n, &dec, &len, &err), 0);
        check_text(json_object_get(o, "decoded"), dec, len, (int)i + 1);
        free(dec);
        free(ids);
    }
    json_decref(all);
}

static void check_decode_file(const rlTokenizer *t, const char *path) {
    json_t *all = read_jsonl(path), *o;
    size_t i;
    json_array_foreach(all, i, o) {
        int n;
        int32_t *ids = json_ids(json_object_get(o, "ids"), &n);
        char *dec;
        size_t len;
        rlError err = {0};
        assert_int_equal(tokenizer_decode(t, ids, n, &dec, &len, &err), 0);
        check_text(json_object_get(o, "text"), dec, len, (int)i + 1);
        free(dec);
        free(ids);
    }
    json_decref(all);
}

static void test_small_encode(void **state) {
    (void)state;
    check_encode_file(small, SMALL("encode.jsonl"));
}
static void test_small_decode(void **state) {
    (void)state;
    check_decode_file(small, SMALL("decode.jsonl"));
}
static void test_qwen_encode(void **state) {
    (void)state;
    check_encode_file(qwen, QWEN("encode.jsonl"));
}
static void test_qwen_decode(void **state) {
    (void)state;
    check_decode_file(qwen, QWEN("decode.jsonl"));
}

/* The same files through the binary: `redlm tokenize` / `detokenize`. */
static void check_cli(const char *cmd, const char *tok, const char *in, const char *key) {
    const char *redlm = getenv("REDLM") ? getenv("REDLM") : "build/redlm";
    char out[] = "/tmp/redlm-tok-XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    char sh[4096];
    snprintf(sh, sizeof(sh), "'%s' %s --tokenizer '%s' --input '%s' --output '%s'", redlm, cmd, tok, in, out);
    assert_int_equal(system(sh), 0);
    json_t *want = read_jsonl(in), *got = read_jsonl(out);
    unlink(out);
    assert_int_equal(json_array_size(want), json_array_size(got));
    for (size_t i = 0; i < json_array_size(want); i++)
        if (!json_equal(json_object_get(json_array_get(want, i), key), json_object_get(json_array_get(got, i), key)))
            fail_msg("redlm %s, %s line %zu: %s differs", cmd, in, i + 1, key);
    json_decref(want);
    json_decref(got);
}

static void test_cli(void **state) {
    (void)state;
    check_cli("tokenize", SMALL("tokenizer.json"), SMALL("encode.jsonl"), "ids");
    check_cli("detokenize", SMALL("tokenizer.json"), SMALL("decode.jsonl"), "text");
    check_cli("tokenize", QWEN("tokenizer.json"), QWEN("encode.jsonl"), "ids");
    check_cli("detokenize", QWEN("tokenizer.json"), QWEN("decode.jsonl"), "text");
}

/* Push ids one by one, taking text after every push; the chunks must be
 * whole UTF-8 and concatenate to the full decode. */
static void check_stream(const rlTokenizer *t, const int32_t *ids, int n, int line) {
    rlError err = {0};
    rlDetok *d = detok_create(t, NULL, 0, 0, &err);
    assert_non_null(d);
    bytebuf all = {0};
    for (int i = 0; i < n; i++) {
        int stopped;
        assert_int_equal(detok_push(d, ids[i], &stopped, &err), 0);
        assert_int_equal(stopped, 0);
        size_t len;
        const char *s = detok_take(d, &len);
        if (!utf8_valid(s, len, NULL)) fail_msg("line %d: chunk %d is not whole UTF-8", line, i);
        bytebuf_append(&all, s, len);
    }
    size_t len;
    const char *s = detok_finish(d, &len);
    bytebuf_append(&all, s, len);
    char *full;
    size_t flen;
    assert_int_equal(tokenizer_decode(t, ids, n, &full, &flen, &err), 0);
    if (flen != all.len || memcmp(full, all.data, flen))
        fail_msg("line %d: streamed text differs from the full decode", line);
    free(full);
    bytebuf_free(&all);
    detok_free(d);
}

/* Every fixture text of both tokenizers. */
static void test_streaming(void **state) {
    (void)state;
    const rlTokenizer *toks[] = {qwen, qwen, small, small};
    const char *files[] = {QWEN("encode.jsonl"), QWEN("decode.jsonl"), SMALL("encode.jsonl"), SMALL("decode.jsonl")};
    for (int f = 0; f < 4; f++) {
        json_t *all = read_jsonl(files[f]), *o;
        size_t i;
        json_array_foreach(all, i, o) {
            int n;
            int32_t *ids = json_ids(json_object_get(o, "ids"), &n);
            check_stream(toks[f], ids, n, (int)i + 1);
            free(ids);
        }
        json_decref(all);
    }
}

/* Stream text's tokens with the given stops; return what came out. */
static char *stream_with_stops(const rlTokenizer *t, const char *text, char **stops, int n_stops,
                               int *stopped_at, int *n_tokens) {
    int32_t *ids;
    int n;
    rlError err = {0};
    assert_int_equal(tokenizer_encode(t, text, strlen(text), &ids, &n, &err), 0);
    rlDetok *d = detok_create(t, stops, n_stops, 0, &err);
    assert_non_null(d);
    bytebuf out = {0};
    *stopped_at = -1;
    *n_tokens = n;
    for (int i = 0; i < n; i++) {
        int stopped;
        assert_int_equal(detok_push(d, ids[i], &stopped, &err), 0);
        size_t len;
        const char *s = detok_take(d, &len);
        bytebuf_append(&out, s, len);
        if (stopped) {
            *stopped_at = i;
            break;
        }
    }
    size_t len;
    const char *s = detok_finish(d, &len);
    bytebuf_append(&out, s, len);
    detok_free(d);
    free(ids);
    char *r = bytebuf_steal(&out, NULL);
    return r;
}

/* Every text of a fixture file, with a random substring of it (up to 12
 * bytes, whole characters) as the stop: the output is the text before its
 * first occurrence. */
static void check_random_stops(const rlTokenizer *t, const char *path) {
    json_t *all = read_jsonl(path), *o;
    size_t i;
    int at, n;
    srand(7);
    json_array_foreach(all, i, o) {
        const char *dec = json_string_value(json_object_get(o, "decoded"));
        size_t len = strlen(dec);
        if (len < 4 || strlen(dec) != json_string_length(json_object_get(o, "decoded"))) continue;
        size_t a = (size_t)rand() % (len - 2), b = a + 1 + (size_t)rand() % (len - a - 1 < 12 ? len - a - 1 : 12);
        while (a > 0 && ((unsigned char)dec[a] & 0xC0) == 0x80) a--;
        while (b < len && ((unsigned char)dec[b] & 0xC0) == 0x80) b++;
        char stop[64];
        if (b - a >= sizeof(stop)) continue;
        memcpy(stop, dec + a, b - a);
        stop[b - a] = 0;
        char *stops[] = {stop};
        /* encode the decoded text: it round-trips, and the stop is in it */
        char *r = stream_with_stops(t, dec, stops, 1, &at, &n);
        size_t want = (size_t)(strstr(dec, stop) - dec);
        if (strlen(r) != want || memcmp(r, dec, want))
            fail_msg("%s line %zu, stop \"%s\": got \"%s\"", path, i + 1, stop, r);
        free(r);
    }
    json_decref(all);
}

static void test_stop_strings(void **state) {
    (void)state;
    rlTokenizer *t = qwen;
    int at, n;
    /* "User:" is several tokens ("\n", "User", ":"), found across them. */
    char *stops1[] = {"\nUser:"};
    char *r = stream_with_stops(t, "The answer is 42.\nUser: and more text", stops1, 1, &at, &n);
    assert_string_equal(r, "The answer is 42.");
    assert_true(at >= 0 && at < n - 1);
    free(r);
    /* A stop inside a multi-byte character's token split, and the earliest
     * of several stops winning. */
    char *stops2[] = {"世界", "你好"};
    r = stream_with_stops(t, "说：你好，世界！", stops2, 2, &at, &n);
    assert_string_equal(r, "说：");
    free(r);
    /* A prefix of a stop held back, then released at the end. */
    char *stops3[] = {"END!"};
    r = stream_with_stops(t, "almost the END", stops3, 1, &at, &n);
    assert_string_equal(r, "almost the END");
    assert_int_equal(at, -1);
    free(r);
    /* A stop at the very start, and one ending inside a token ("xyz" in "xyzw"). */
    char *stops4[] = {"Hello"};
    r = stream_with_stops(t, "Hello world", stops4, 1, &at, &n);
    assert_string_equal(r, "");
    assert_int_equal(at, 0);
    free(r);
    check_random_stops(qwen, QWEN("encode.jsonl"));
    check_random_stops(small, SMALL("encode.jsonl"));
}

/* A megabyte of one character is one pre-token: merging must stay
 * O(n log n).  Each must round-trip.  The other shapes (many pre-tokens,
 * multi-byte characters) use a quarter of that to keep the test short. */
static void test_long_inputs(void **state) {
    (void)state;
    rlTokenizer *t = qwen;
    const char *units[] = {"a", " ", "1", "\n", "é", "你", "!", "😀", " a"};
    size_t mb = 1 << 20;
    char *text = malloc(mb + 8);
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        size_t ul = strlen(units[u]), len = 0, size = u == 0 ? mb : mb / 4;
        while (len + ul <= size) {
            memcpy(text + len, units[u], ul);
            len += ul;
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int32_t *ids;
        int n;
        rlError err = {0};
        assert_int_equal(tokenizer_encode(t, text, len, &ids, &n, &err), 0);
        char *dec;
        size_t dlen;
        assert_int_equal(tokenizer_decode(t, ids, n, &dec, &dlen, &err), 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        assert_int_equal(dlen, len);
        assert_memory_equal(dec, text, len);
        print_message("  %zu KiB of \"%s\": %d tokens, %.3f s\n", size >> 10, units[u], n,
                      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
        free(dec);
        free(ids);
    }
    free(text);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    rlTokenizer *t = small;
    const char *bad[] = {"\xff", "abc\xc3", "\xed\xa0\x80", "\xc0\xaf", "ok \xf4\x90\x80\x80", "\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int32_t *ids = (int32_t *)1;
        int n = 5;
        rlError err = {0};
        assert_int_equal(tokenizer_encode(t, bad[i], strlen(bad[i]), &ids, &n, &err), -1);
        assert_int_equal(err.code, RL_EINPUT);
        assert_true(!strncmp(err.msg, "invalid_utf8:", 13));
        assert_null(ids);
        assert_int_equal(n, 0);
    }
    /* NUL is a character like any other. */
    int32_t *ids;
    int n;
    rlError err = {0};
    assert_int_equal(tokenizer_encode(t, "a\0b", 3, &ids, &n, &err), 0);
    char *dec;
    size_t len;
    assert_int_equal(tokenizer_decode(t, ids, n, &dec, &len, &err), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(dec, "a\0b", 3);
    free(dec);
    free(ids);
}

/* Write the small tokenizer.json with one part replaced, and load it. */
static void check_refused(const char *pointer, const char *value_json, const char *expect) {
    json_error_t je;
    json_t *root = json_load_file(SMALL("tokenizer.json"), 0, &je);
    assert_non_null(root);
    json_t *v = json_loads(value_json, JSON_DECODE_ANY, &je);
    assert_non_null(v);
    char key[128];
    snprintf(key, sizeof(key), "%s", pointer);
    json_t *parent = root;
    char *dot = strchr(key, '.');
    if (dot) {
        *dot = 0;
        parent = json_object_get(root, key);
        if (json_is_array(parent)) parent = json_array_get(parent, 0);
        memmove(key, dot + 1, strlen(dot + 1) + 1);
    }
    json_object_set_new(parent, key, v);
    char path[] = "/tmp/redlm-tokjson-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);
    rlError err = {0};
    rlTokenizer *t = tokenizer_load(path, &err);
    unlink(path);
    if (t) fail_msg("%s = %s was accepted", pointer, value_json);
    if (!strstr(err.msg, expect)) fail_msg("%s: message does not say \"%s\": %s", pointer, expect, err.msg);
}

static void test_refused(void **state) {
    (void)state;
    check_refused("model.type", "\"WordPiece\"", "model type WordPiece");
    check_refused("model.byte_fallback", "true", "byte_fallback");
    check_refused("model.unk_token", "\"<unk>\"", "unk_token");
    check_refused("model.continuing_subword_prefix", "\"##\"", "continuing_subword_prefix");
    check_refused("normalizer", "{\"type\": \"NFKC\"}", "normalizer NFKC");
    check_refused("pre_tokenizer", "{\"type\": \"Whitespace\"}", "pre_tokenizer Whitespace");
    check_refused("pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}",
                  "pre_tokenizer ByteLevel");
    check_refused("decoder", "null", "decoder null");
    check_refused("decoder", "{\"type\": \"WordPiece\"}", "decoder WordPiece");
    check_refused("post_processor", "{\"type\": \"TemplateProcessing\"}", "post_processor TemplateProcessing");
    check_refused("truncation", "{\"max_length\": 5}", "truncation");
    check_refused("added_tokens.lstrip", "true", "lstrip");
    /* an id near a billion would size the by-id tables in gigabytes */
    check_refused("model.vocab", "{\"a\": 0, \"b\": 636894065}", "is out of range (0..16777215)");
    check_refused("added_tokens.id", "1073741823", "(0..16777215)");
    check_refused("model.merges", "[\"a zz\"]", "not in the vocab");
    check_refused("model.merges", "[[\"a\"]]", "model.merges");
    /* a key given twice (the second vocab would be indexed over the first) */
    static const char *twice[] = {
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"vocab\": {\"b\": 0}}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"model\": {\"vocab\": {}}}"};
    for (size_t k = 0; k < sizeof(twice) / sizeof(*twice); k++) {
        char tpath[] = "/tmp/redlm-tokjson-XXXXXX";
        int tfd = mkstemp(tpath);
        assert_int_equal(write(tfd, twice[k], strlen(twice[k])), (ssize_t)strlen(twice[k]));
        close(tfd);
        rlError terr = {0};
        assert_null(tokenizer_load(tpath, &terr));
        unlink(tpath);
        if (!strstr(terr.msg, "is given twice")) fail_msg("%s: %s", twice[k], terr.msg);
    }
    /* a file that is not JSON at all, and one that is missing */
    char path[] = "/tmp/redlm-tokjson-XXXXXX";
    int fd = mkstemp(path);
    assert_int_equal(write(fd, "{\"model\": {\"vocab\": {\"a\": 0,}}", 30), 30);
    close(fd);
    rlError err = {0};
    assert_null(tokenizer_load(path, &err));
    assert_non_null(strstr(err.msg, "line 1"));
    unlink(path);
    assert_null(tokenizer_load("/nonexistent/tokenizer.json", &err));
    assert_int_equal(err.code, RL_EIO);
}

/* Two threads encoding the fixture at once share one tokenizer (and its
 * cache): each must still get Hugging Face's ids. */
typedef struct threadJob {
    const rlTokenizer *t;
    json_t *all;
    int bad;
} threadJob;

static void *encode_all(void *arg) {
    threadJob *job = arg;
    size_t i;
    json_t *o;
    json_array_foreach(job->all, i, o) {
        json_t *text = json_object_get(o, "text"), *want = json_object_get(o, "ids");
        int32_t *ids;
        int n;
        rlError err = {0};
        if (tokenizer_encode(job->t, json_string_value(text), json_string_length(text), &ids, &n, &err)) {
            job->bad++;
            continue;
        }
        int ok = (size_t)n == json_array_size(want);
        for (int k = 0; ok && k < n; k++) ok = ids[k] == json_integer_value(json_array_get(want, (size_t)k));
        job->bad += !ok;
        free(ids);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    rlTokenizer *t = qwen;
    json_t *all = read_jsonl(QWEN("encode.jsonl"));
    threadJob jobs[2] = {{t, all, 0}, {t, all, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    assert_int_equal(jobs[0].bad + jobs[1].bad, 0);
    json_decref(all);
}

static int collect_piece(void *ctx, const char *s, size_t n, rlError *err) {
    (void)err;
    bytebuf *b = ctx;
    bytebuf_append(b, s, n);
    return bytebuf_putc(b, '|');
}

/* Oniguruma's \s (Hugging Face's engine) does not take U+180E, PCRE2's
 * does: "\u180E\u180Ex" must split as punctuation then a letter. */
static void test_pretok_oniguruma(void **state) {
    (void)state;
    const char *re = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pretok p = {0};
    rlError err = {0};
    assert_int_equal(pretok_compile(&p, re, strlen(re), 1, &err), 0);
    struct { const char *in, *want; } cases[] = {
        {"\xE1\xA0\x8E\xE1\xA0\x8Ex", "\xE1\xA0\x8E\xE1\xA0\x8E|x|"},
        {"a  b\u3000\u3000c\n\n", "a| | b|\u3000|\u3000c|\n\n|"},
        {"it's I'LL x\xC5\xBF", "it|'s| I|'LL| x\xC5\xBF|"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bytebuf b = {0};
        assert_int_equal(pretok_split(&p, cases[i].in, strlen(cases[i].in), collect_piece, &b, &err), 0);
        assert_string_equal(b.data, cases[i].want);
        bytebuf_free(&b);
    }
    pretok_free(&p);
    /* \h is a hex digit to Oniguruma, \w takes marks, \W is its negation */
    const char *re2 = "\\h+|\\w+|\\W";
    assert_int_equal(pretok_compile(&p, re2, strlen(re2), 1, &err), 0);
    bytebuf b = {0};
    assert_int_equal(pretok_split(&p, "beef\tn\xCC\x83o!", 10, collect_piece, &b, &err), 0);
    assert_int_equal(b.len, 14);
    assert_string_equal(b.data, "beef|\t|n\xCC\x83o|!|");
    bytebuf_free(&b);
    pretok_free(&p);
}

static void test_prompt_ids(void **state) {
    (void)state;
    rlTokenizer *t = small;
    rlError err = {0};
    rlRequest r;
    /* tokenizer-small has no tokenizer_config.json: the Qwen2.5 fallback. */
    rlChat *chat = chat_open(fixture("FIXTURES", "build/fixtures", "tokenizer-small"), &err);
    assert_non_null(chat);
    assert_non_null(strstr(chat_describe(chat), "built-in Qwen2.5"));
    memset(&r, 0, sizeof(r));
    assert_int_equal(prompt_fill_ids(t, chat, &r, &err), -1);
    assert_int_equal(err.code, RL_EINPUT);
    r.prompt = "<|im_start|>hi";
    assert_int_equal(prompt_fill_ids(t, chat, &r, &err), 0);
    assert_true(r.n_prompt_ids >= 2);
    assert_int_equal(r.prompt_ids[0], 2001);
    free(r.prompt_ids);
    memset(&r, 0, sizeof(r));
    r.messages = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    r.add_generation_prompt = 1;
    assert_int_equal(prompt_fill_ids(t, chat, &r, &err), 0);
    char *text;
    size_t len;
    assert_int_equal(tokenizer_decode(t, r.prompt_ids, r.n_prompt_ids, &text, &len, &err), 0);
    assert_string_equal(text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                              "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    free(r.prompt_ids);
    json_decref(r.messages);
    memset(&r, 0, sizeof(r));
    r.prompt = "bad \xff";
    assert_int_equal(prompt_fill_ids(t, chat, &r, &err), -1);
    assert_int_equal(strncmp(err.msg, "invalid_utf8:", 13), 0);
    chat_free(chat);
}

/* A damaged tokenizer.json (cut short anywhere, or a byte changed) is an
 * error or, rarely, still a valid file: never a crash. */
static void test_damaged_files(void **state) {
    (void)state;
    FILE *f = fopen(SMALL("tokenizer.json"), "rb");
    assert_non_null(f);
    static char data[1 << 17];
    size_t len = fread(data, 1, sizeof(data), f);
    fclose(f);
    char path[] = "/tmp/redlm-tokjson-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    srand(11);
    for (int k = 0; k < 120; k++) {
        size_t cut = k < 60 ? (size_t)rand() % len : len, at = (size_t)rand() % len;
        char saved = data[at];
        if (k >= 60) data[at] = "{}[]\",:0a\x80 "[rand() % 12];
        f = fopen(path, "wb");
        fwrite(data, 1, cut, f);
        fclose(f);
        data[at] = saved;
        rlError err = {0};
        rlTokenizer *t = tokenizer_load(path, &err);
        if (t) {
            int32_t *ids;
            int n;
            if (tokenizer_encode(t, "Hello, world! <|im_end|>", 24, &ids, &n, &err) == 0) free(ids);
            tokenizer_free(t);
        } else {
            assert_true(err.msg[0] != 0);
        }
    }
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_encode), cmocka_unit_test(test_small_decode),
        cmocka_unit_test(test_qwen_encode),  cmocka_unit_test(test_qwen_decode),
        cmocka_unit_test(test_cli),          cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_stop_strings), cmocka_unit_test(test_long_inputs),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_pretok_oniguruma), cmocka_unit_test(test_threads),
        cmocka_unit_test(test_prompt_ids),       cmocka_unit_test(test_damaged_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
