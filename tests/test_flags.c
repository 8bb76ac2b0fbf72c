/* test_flags.c: the one flag parser (worker/lib/flags.c): every value type,
 * --flag=value, aliases, ranges, sizes, enums, lists, unknown flags with
 * their closest match, conflicts and requirements, --help from the table;
 * and the engine's flags under vLLM's names (worker/engine/engine_flags.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/engine/engine_flags.h"
#include "worker/lib/flags.h"

/* A command with one flag of every type. */
typedef struct testArgs {
    int n, on, level, seqs;
    long long ttl;
    uint64_t seed;
    double frac, timeout;
    size_t mem;
    const char *in, *backend, *dtype;
    int ids[8], n_ids, parts[4], n_parts;
    rlFlags fs;
} testArgs;

static const rlFlagChoice backends[] = {{"cpu", NULL, 0}, {"cuda", NULL, 0}, {NULL, NULL, 0}};
static const rlFlagChoice levels[] = {{"low", NULL, 1}, {"high", NULL, 2}, {"hi", NULL, 2},
                                      {NULL, NULL, 0}};

static void declare(testArgs *a) {
    memset(a, 0, sizeof(*a));
    a->on = 1;
    rlFlags *fs = &a->fs;
    flags_init(fs, "demo", "usage: redlm demo [options]\n");
    flags_int(fs, "--count", &a->n, 1, 64, "N", "how many")->aliases = "-c --number";
    rlFlag *b = flags_bool(fs, "--enable-thing", &a->on, "the thing");
    b->negatable = 1;
    b->aliases = "--thing";
    flags_enum_int(fs, "--level", &a->level, levels, "how much");
    flags_long(fs, "--ttl", &a->ttl, 0, 1LL << 40, "S", "seconds");
    flags_u64(fs, "--seed", &a->seed, "N", "seed");
    flags_double(fs, "--frac", &a->frac, 0, 1, 1, "F", "a share in (0, 1]");
    flags_double(fs, "--timeout", &a->timeout, 0, 1, INFINITY, "S", "positive");
    flags_size(fs, "--mem", &a->mem, 1, "memory");
    flags_string(fs, "--input", &a->in, "FILE|-", "input");
    flags_enum(fs, "--backend", &a->backend, backends, "backend");
    flags_enum(fs, "--dtype", &a->dtype, engine_dtypes, "dtype");
    flags_list(fs, "--devices", a->ids, 8, &a->n_ids, 0, 1023, 1, "LIST", "set");
    flags_list(fs, "--parts", a->parts, 4, &a->n_parts, 1, 100, 0, "L", "list");
    flags_int(fs, "--max-num-seqs", &a->seqs, 1, 1000, "N", "seqs");
}

/* Parse the words after the command's name, up to a NULL. */
static int parse_words(testArgs *a, rlError *err, ...) {
    char *argv[32] = {"demo"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *w; argc < 32 && (w = va_arg(ap, char *));) argv[argc++] = w;
    va_end(ap);
    memset(err, 0, sizeof(*err));
    return flags_parse(&a->fs, argc, argv, err);
}
#define parse(a, err, ...) parse_words(a, err, __VA_ARGS__, (char *)NULL)

#define EXPECT_ERR(a, needle, ...)                                                          \
    do {                                                                                    \
        rlError e_;                                                                         \
        declare(a);                                                                         \
        assert_int_equal(parse_words(a, &e_, __VA_ARGS__, (char *)NULL), -1);               \
        assert_int_equal(e_.code, RL_EUSAGE);                                               \
        if (!strstr(e_.msg, needle)) fail_msg("'%s' does not mention '%s'", e_.msg, needle); \
    } while (0)

static void test_types(void **state) {
    (void)state;
    testArgs a;
    rlError err;
    declare(&a);
    assert_int_equal(parse(&a, &err, "--count", "3", "--no-enable-thing", "--level=hi",
                           "--ttl", "86400", "--seed=18446744073709551615", "--frac", "0.5",
                           "--timeout=2.5", "--mem", "1GiB", "--input", "-", "--backend=cuda",
                           "--dtype", "half"),
                     0);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.on, 0);
    assert_int_equal(a.level, 2);
    assert_true(a.ttl == 86400);
    assert_true(a.seed == UINT64_MAX);
    assert_true(a.frac == 0.5);
    assert_true(a.timeout == 2.5);
    assert_true(a.mem == (size_t)1 << 30);
    assert_string_equal(a.in, "-");
    assert_string_equal(a.backend, "cuda");
    assert_string_equal(a.dtype, "fp16");
    assert_int_equal(flags_given(&a.fs, "--count"), 1);
    assert_int_equal(flags_given(&a.fs, "--parts"), 0);

    /* aliases and the --no- form of an alias; the last value wins */
    declare(&a);
    assert_int_equal(parse(&a, &err, "-c", "2", "--number=5", "--thing", "--no-thing",
                           "--enable-thing"), 0);
    assert_int_equal(a.n, 5);
    assert_int_equal(a.on, 1);
    assert_int_equal(flags_given(&a.fs, "-c"), 2);

    /* lists: a set with ranges, each once; a plain list may repeat */
    declare(&a);
    assert_int_equal(parse(&a, &err, "--devices", "0-2,6,4", "--parts=14,14"), 0);
    assert_int_equal(a.n_ids, 5);
    int want[] = {0, 1, 2, 6, 4};
    assert_memory_equal(a.ids, want, sizeof(want));
    assert_int_equal(a.n_parts, 2);
    assert_int_equal(a.parts[1], 14);

    /* every dtype spelling vLLM takes, normalised */
    const char *dt[][2] = {{"auto", "auto"},      {"bfloat16", "bf16"}, {"bf16", "bf16"},
                           {"float16", "fp16"},   {"half", "fp16"},     {"fp16", "fp16"},
                           {"float32", "fp32"},   {"fp32", "fp32"}};
    for (size_t i = 0; i < sizeof(dt) / sizeof(dt[0]); i++) {
        declare(&a);
        assert_int_equal(parse(&a, &err, "--dtype", dt[i][0]), 0);
        assert_string_equal(a.dtype, dt[i][1]);
    }
}

static void test_value_errors(void **state) {
    (void)state;
    testArgs a;
    EXPECT_ERR(&a, "--count '0' must be a whole number from 1 to 64", "--count", "0");
    EXPECT_ERR(&a, "--number '65' must be a whole number from 1 to 64", "--number", "65");
    EXPECT_ERR(&a, "whole number", "--count", "3x");
    EXPECT_ERR(&a, "whole number", "--count", " 3");
    EXPECT_ERR(&a, "whole number", "--count", "0x10");
    EXPECT_ERR(&a, "whole number", "--seed", "-1");
    EXPECT_ERR(&a, "whole number", "--seed", "18446744073709551616");
    EXPECT_ERR(&a, "whole number", "--ttl", "1099511627777");
    EXPECT_ERR(&a, "--frac '0' must be a number above 0 and at most 1", "--frac", "0");
    EXPECT_ERR(&a, "at most 1", "--frac=1.5");
    EXPECT_ERR(&a, "at most 1", "--frac", "nan");
    EXPECT_ERR(&a, "--timeout '-1' must be a positive number", "--timeout", "-1");
    EXPECT_ERR(&a, "--count needs a value", "--count");
    EXPECT_ERR(&a, "--input needs a value, but --count is an option", "--input", "--count", "2");
    EXPECT_ERR(&a, "--input is empty", "--input", "");
    EXPECT_ERR(&a, "--thing takes no value", "--thing=1");
    EXPECT_ERR(&a, "unexpected argument 'stray'", "stray");
    /* enums name their choices, aliases after the canonical ones */
    EXPECT_ERR(&a, "--backend 'rocm' is not a choice: give cpu or cuda", "--backend", "rocm");
    EXPECT_ERR(&a, "give low, high or hi", "--level", "max");
    EXPECT_ERR(&a, "give auto, bf16, fp16 or fp32 (also bfloat16, float16, half, float32, float)",
               "--dtype", "int8");
    /* lists */
    EXPECT_ERR(&a, "lists 1 twice", "--devices", "0,1,1");
    EXPECT_ERR(&a, "not a list", "--devices", "3-1");
    EXPECT_ERR(&a, "not a list", "--devices", "0,");
    EXPECT_ERR(&a, "not a list", "--devices", "0,x");
    EXPECT_ERR(&a, "not a list", "--parts", "1-3");
    EXPECT_ERR(&a, "more than 8 entries", "--devices", "0-8");
}

static void test_sizes(void **state) {
    (void)state;
    static const struct { const char *s; size_t want; } ok[] = {
        {"24GiB", (size_t)24 << 30}, {"24GB", 24000000000ULL}, {"24G", (size_t)24 << 30},
        {"24gib", (size_t)24 << 30}, {"141GB", 141000000000ULL}, {"512MiB", (size_t)512 << 20},
        {"512M", (size_t)512 << 20}, {"512MB", 512000000}, {"600KiB", 600 * 1024},
        {"600K", 600 * 1024}, {"2KB", 2000}, {"1TiB", (size_t)1 << 40}, {"2TB", 2000000000000ULL},
        {"1.5GiB", (size_t)3 << 29}, {"1048576", 1048576}, {"1048576B", 1048576},
        {"24 GiB", (size_t)24 << 30}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        size_t b = 0;
        rlError err = {0};
        if (flags_parse_size("--mem", ok[i].s, 1, &b, &err)) fail_msg("%s: %s", ok[i].s, err.msg);
        if (b != ok[i].want) fail_msg("%s: %zu bytes, want %zu", ok[i].s, b, ok[i].want);
    }
    static const struct { const char *s, *needle; } bad[] = {
        {"24", "--mem 24: a number without a unit is bytes, and 24 bytes is less than 1 MiB; "
               "did you mean 24GiB?"},
        {"80", "did you mean 80GiB?"},
        {"1048575", "did you mean 1048575GiB?"},
        {"1.5", "whole number"},
        {"lots", "is not a size"},
        {"-3GiB", "is not a size"},
        {"3 parsecs", "is not a size"},
        {"24GiBs", "is not a size"},
        {"", "is not a size"},
        {"99999999TB", "more than any machine's memory"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t b = 0;
        rlError err = {0};
        assert_int_equal(flags_parse_size("--mem", bad[i].s, 1, &b, &err), -1);
        assert_int_equal(err.code, RL_EUSAGE);
        if (!strstr(err.msg, bad[i].needle)) fail_msg("'%s' does not mention '%s'", err.msg, bad[i].needle);
    }
    size_t b;
    rlError err;
    assert_int_equal(flags_parse_size("--max-backlog", "512KiB", 1 << 20, &b, &err), -1);
    assert_non_null(strstr(err.msg, "less than the least it can be, 1 MiB"));
    /* through a flag */
    testArgs a;
    declare(&a);
    assert_int_equal(parse(&a, &err, "--mem=1048576"), 0);
    assert_true(a.mem == 1048576);
    EXPECT_ERR(&a, "did you mean 24GiB?", "--mem", "24");
}

static void test_unknown(void **state) {
    (void)state;
    testArgs a;
    EXPECT_ERR(&a, "unknown option --cuont (did you mean --count?)", "--cuont");
    EXPECT_ERR(&a, "unknown option --max-num-seq (did you mean --max-num-seqs?)", "--max-num-seq=4", "--count=1");
    EXPECT_ERR(&a, "unknown option --no-thng (did you mean --no-thing?)", "--no-thng");
    EXPECT_ERR(&a, "unknown option --frobnicate (redlm demo --help lists the options)", "--frobnicate");
    declare(&a);
    a.fs.unknown_hint = "worker options go after --";
    rlError err;
    assert_int_equal(parse(&a, &err, "--frobnicate"), -1);
    assert_string_equal(err.msg, "unknown option --frobnicate (worker options go after --)");
    /* the generate example of the issue, through the engine's real table */
    rlEngineFlags ef;
    engine_flags_init(&ef);
    rlFlags fs;
    flags_init(&fs, "generate", NULL);
    engine_flags_add(&fs, &ef);
    char *argv[] = {"generate", "--model", "m", "--tensor-paralel-size", "2"};
    assert_int_equal(flags_parse(&fs, 5, argv, &err), -1);
    assert_string_equal(err.msg,
                        "unknown option --tensor-paralel-size (did you mean --tensor-parallel-size?)");
}

static void test_rules(void **state) {
    (void)state;
    testArgs a;
    rlError err;
    declare(&a);
    flags_conflict(&a.fs, "--input", "--devices");
    flags_requires(&a.fs, "--parts", "--devices");
    assert_int_equal(parse(&a, &err, "--count", "1", "--input", "x"), 0);
    assert_int_equal(parse(&a, &err, "--count", "1", "--input", "x", "--devices", "0"), -1);
    assert_string_equal(err.msg, "--input and --devices cannot be given together: choose one");
    declare(&a);
    flags_requires(&a.fs, "--parts", "--devices");
    assert_int_equal(parse(&a, &err, "--count", "1", "--parts", "3"), -1);
    assert_string_equal(err.msg, "--parts only applies together with --devices");
    /* required flags are checked after the rest; --help wins over everything */
    declare(&a);
    a.fs.f[0].required = 1;
    assert_int_equal(parse_words(&a, &err, (char *)NULL), -1);
    assert_string_equal(err.msg, "--count is required (redlm demo --help)");
    assert_int_equal(parse(&a, &err, "--bogus", "--help"), 1);
    assert_int_equal(parse(&a, &err, "-h"), 1);
    /* "--" ends the options where a command allows it */
    declare(&a);
    a.fs.dashdash = 1;
    assert_int_equal(parse(&a, &err, "--count", "2", "--", "--model", "x"), 0);
    assert_int_equal(a.fs.n_rest, 2);
    assert_string_equal(a.fs.rest[0], "--model");
    /* flags_find: any spelling, with or without a value */
    assert_ptr_equal(flags_find(&a.fs, "--number=3"), &a.fs.f[0]);
    assert_ptr_equal(flags_find(&a.fs, "--no-thing"), &a.fs.f[1]);
    assert_null(flags_find(&a.fs, "--no-count"));
}

static void test_help(void **state) {
    (void)state;
    testArgs a;
    declare(&a);
    flags_section(&a.fs, "more:");
    flags_conflict(&a.fs, "--input", "--devices");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    flags_help(&a.fs, f);
    fclose(f);
    printf("%s", text);
    const char *want[] = {"usage: redlm demo [options]\n",
                          "  --count, -c, --number N       how many\n",
                          "  --[no-]enable-thing, --[no-]thing\n",
                          "  --level low|high|hi           how much\n",
                          "  --mem SIZE                    memory\n",
                          "  --dtype auto|bf16|fp16|fp32   dtype\n",
                          "\nmore:\n",
                          "--input and --devices cannot be given together.\n"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(text, want[i])) fail_msg("--help lacks '%s'", want[i]);
    free(text);
}

/* vLLM's names through the engine's table. */
static void test_engine_vllm_names(void **state) {
    (void)state;
    rlEngineFlags ef;
    engine_flags_init(&ef);
    rlFlags fs;
    flags_init(&fs, "generate", NULL);
    engine_flags_add(&fs, &ef);
    char *argv[] = {"generate", "--tensor-parallel-size", "2", "-pp=3", "--dtype", "bfloat16",
                    "--model=DIR", "--no-enable-prefix-caching", "--kv-cache-memory-bytes",
                    "1073741824", "--max-model-len", "4096", "--max-num-seqs", "8",
                    "--max-num-batched-tokens=512", "--gpu-memory-utilization", "0.5",
                    "--block-size", "32", "--seed", "7", "--load-format", "dummy",
                    "--tokenizer", "TOK", "--kv-cache-dtype", "auto", "--trust-remote-code"};
    rlError err = {0};
    assert_int_equal(flags_parse(&fs, sizeof(argv) / sizeof(argv[0]), argv, &err), 0);
    engine_flags_finish(&ef);
    assert_int_equal(ef.o.tp, 2);
    assert_int_equal(ef.o.pp, 3);
    assert_string_equal(ef.o.dtype, "bf16");
    assert_string_equal(ef.o.model, "DIR");
    assert_int_equal(ef.o.prefix_caching, 0);
    assert_true(ef.o.kv_cache_memory == (size_t)1 << 30);
    assert_int_equal(ef.o.max_model_len, 4096);
    assert_int_equal(ef.o.max_num_seqs, 8);
    assert_int_equal(ef.o.max_num_batched_tokens, 512);
    assert_true(ef.o.gpu_memory_utilization == 0.5);
    assert_int_equal(ef.o.block_size, 32);
    assert_true(ef.o.seed == 7);
    assert_string_equal(ef.o.load_format, "dummy");
    assert_string_equal(ef.o.tokenizer, "TOK");
    assert_string_equal(ef.kv_cache_dtype, "auto");
    assert_int_equal(ef.trust_remote_code, 1);
    /* a KV-cache type other than the model's is refused saying which one is */
    engine_flags_init(&ef);
    flags_init(&fs, "generate", NULL);
    engine_flags_add(&fs, &ef);
    char *fp8[] = {"generate", "--model", "m", "--kv-cache-dtype=fp8_e5m2"};
    assert_int_equal(flags_parse(&fs, 4, fp8, &err), -1);
    assert_int_equal(err.code, RL_EUSAGE);
    assert_string_equal(err.msg, "--kv-cache-dtype 'fp8_e5m2': only auto (the KV cache in the model's "
                                 "dtype) is supported in this version; drop the flag or give auto");
    /* the old spelling still turns the prefix cache off */
    engine_flags_init(&ef);
    flags_init(&fs, "generate", NULL);
    engine_flags_add(&fs, &ef);
    char *old[] = {"generate", "--model", "m", "--no-prefix-caching", "-tp", "4"};
    assert_int_equal(flags_parse(&fs, 6, old, &err), 0);
    assert_int_equal(ef.o.prefix_caching, 0);
    assert_int_equal(ef.lay.tp, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),   cmocka_unit_test(test_value_errors),
        cmocka_unit_test(test_sizes),   cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_rules),   cmocka_unit_test(test_help),
        cmocka_unit_test(test_engine_vllm_names)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
