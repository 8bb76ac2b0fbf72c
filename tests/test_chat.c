/* test_chat.c: the Jinja interpreter and chat templates against their
 * outside references.
 *
 * - every line of chat/qwen3-template.jsonl (transformers' apply_chat_template
 *   with Qwen3's template): the same text and ids through chat_render and
 *   the Qwen tokenizer;
 * - chat/jinja-cases.jsonl (made by make_jinja_cases.py with Jinja2 set up
 *   as transformers sets it up): one case per construct and conversations
 *   through templates of other model families and the Qwen2.5 fallback:
 *   the same output, or an error where Python raised one;
 * - each construct outside the subset refused at load, by name;
 * - hostile templates stopped by the step, memory, output and depth bounds;
 * - where a model's template comes from (chat_template.jinja,
 *   tokenizer_config.json as a string or named list, the fallback). */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/chat/chat.h"
#include "worker/chat/jinja.h"
#include "worker/tokenizer/tokenizer.h"

static const char *dir_of(const char *env, const char *fallback) {
    const char *d = getenv(env);
    return d ? d : fallback;
}

static char *path(const char *env, const char *fallback, const char *rel) {
    static char buf[8][1024];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir_of(env, fallback), rel);
    return p;
}
#define FIX(rel) path("FIXTURES", "build/fixtures", rel)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *render(const char *src, const char *vars_json, rlError *err) {
    jjTemplate *t = jinja_load(src, strlen(src), "test", err);
    if (!t) return NULL;
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
    char *out = NULL;
    if (jinja_render(t, vars, NULL, &out, NULL, err)) out = NULL;
    json_decref(vars);
    jinja_free(t);
    return out;
}

static void test_qwen3_fixture(void **state) {
    (void)state;
    rlError err = {0};
    rlTokenizer *tok = tokenizer_load(FIX("tokenizer-qwen/tokenizer.json"), &err);
    if (!tok) fail_msg("%s", err.msg);
    rlChat *chat = chat_open(FIX("tokenizer-qwen"), &err);
    if (!chat) fail_msg("%s", err.msg);
    assert_non_null(strstr(chat_describe(chat), "tokenizer_config.json"));
    FILE *f = fopen(FIX("chat/qwen3-template.jsonl"), "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    double t0 = now();
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        assert_non_null(o);
        json_t *kwargs = json_object();
        json_t *thinking = json_object_get(o, "enable_thinking");
        if (thinking && !json_is_null(thinking)) json_object_set(kwargs, "enable_thinking", thinking);
        char *text;
        size_t len;
        if (chat_render(chat, json_object_get(o, "messages"), json_object_get(o, "tools"),
                        json_is_true(json_object_get(o, "add_generation_prompt")), kwargs, &text, &len, &err))
            fail_msg("line %d: %s", n + 1, err.msg);
        const char *want = json_string_value(json_object_get(o, "text"));
        if (strlen(want) != len || memcmp(want, text, len))
            fail_msg("line %d: text differs\n--- want\n%s\n--- got\n%s", n + 1, want, text);
        int32_t *ids;
        int n_ids;
        assert_int_equal(tokenizer_encode(tok, text, len, &ids, &n_ids, &err), 0);
        json_t *want_ids = json_object_get(o, "ids");
        assert_int_equal((size_t)n_ids, json_array_size(want_ids));
        for (int i = 0; i < n_ids; i++) assert_int_equal(ids[i], json_integer_value(json_array_get(want_ids, i)));
        free(ids);
        free(text);
        json_decref(kwargs);
        json_decref(o);
        n++;
    }
    printf("qwen3-template.jsonl: %d conversations, text and ids equal (%.1f ms)\n", n, (now() - t0) * 1e3);
    assert_int_equal(n, 120);
    free(line);
    fclose(f);
    chat_free(chat);
    tokenizer_free(tok);
}

static void test_jinja_cases(void **state) {
    (void)state;
    FILE *f = fopen(FIX("chat/jinja-cases.jsonl"), "r");
    assert_non_null(f);
    rlError err = {0};
    rlChat *fallback = chat_open(FIX("tokenizer-small"), &err);
    assert_non_null(fallback);
    char *line = NULL;
    size_t cap = 0;
    int n = 0, outs = 0, errors = 0, failures = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *c = json_loads(line, 0, NULL);
        assert_non_null(c);
        n++;
        const char *src = json_string_value(json_object_get(c, "template"));
        const json_t *want = json_object_get(c, "out");
        jjTemplate *t = jinja_load(src, strlen(src), "case", &err);
        char *out = NULL;
        size_t len = 0;
        int rc = t ? jinja_render(t, json_object_get(c, "vars"), NULL, &out, &len, &err) : -1;
        if (want && (rc || len != json_string_length(want) || memcmp(out, json_string_value(want), len))) {
            printf("case %d (%s): %.300s\n  want %.400s\n  got  %.400s\n", n, json_string_value(json_object_get(c, "name")),
                   src, json_string_value(want), rc ? err.msg : out);
            failures++;
        } else if (!want && !rc) {
            printf("case %d: Python failed (%s) but redlm rendered %.300s\n", n,
                   json_string_value(json_object_get(c, json_object_get(c, "error") ? "error" : "load_error")), out);
            failures++;
        }
        want ? outs++ : errors++;
        /* The Qwen2.5 cases again through the fallback of a model without
         * a template. */
        const json_t *vars = json_object_get(c, "vars");
        if (!strcmp(json_string_value(json_object_get(c, "name")), "qwen25") && want &&
            json_object_size(vars) == 5 + (json_object_get(vars, "enable_thinking") != NULL)) {
            char *fb;
            size_t fb_len;
            if (chat_render(fallback, json_object_get(vars, "messages"), json_object_get(vars, "tools"),
                            json_is_true(json_object_get(vars, "add_generation_prompt")), NULL, &fb, &fb_len, &err) ||
                fb_len != len || memcmp(fb, out, len)) {
                printf("case %d: the fallback renders differently\n", n);
                failures++;
            }
            if (fb) free(fb);
        }
        free(out);
        jinja_free(t);
        json_decref(c);
    }
    printf("jinja-cases.jsonl: %d cases, %d renderings and %d errors as Jinja2's\n", n, outs, errors);
    assert_int_equal(failures, 0);
    assert_true(n > 300);
    free(line);
    fclose(f);
    chat_free(fallback);
}

/* Each template is refused at load and the message names the construct. */
static void test_refusals(void **state) {
    (void)state;
    static const struct { const char *src, *names; } cases[] = {
        {"{{ x | xmlattr }}", "filter 'xmlattr'"},
        {"{{ x | wordwrap(3) }}", "filter 'wordwrap'"},
        {"{% if x is escaped %}{% endif %}", "test 'escaped'"},
        {"{% include 'other.jinja' %}", "{% include %}"},
        {"{% extends 'base' %}", "{% extends %}"},
        {"{% import 'm' as m %}", "{% import %}"},
        {"{% filter upper %}x{% endfilter %}", "{% filter %}"},
        {"{% call m() %}x{% endcall %}", "{% call %}"},
        {"{% with a = 1 %}{% endwith %}", "{% with %}"},
        {"{% block b %}{% endblock %}", "{% block %}"},
        {"{% do x.append(1) %}", "{% do %}"},
        {"{{ cycler('a', 'b') }}", "function 'cycler'"},
        {"{{ lipsum() }}", "function 'lipsum'"},
        {"{{ '{}'.format(1) }}", "method 'format'"},
        {"{{ x.append(1) }}", "method 'append'"},
        {"{% for x in y recursive %}{% endfor %}", "recursive"},
        {"{{ f(*args) }}", "*args"},
        {"{% set x | upper %}a{% endset %}", "filters on a block"},
        {"{% break %}", "outside a for loop"},
        {"{% for x in y %}", "{% endfor %} is missing"},
        {"{% endif %}", "unexpected {% endif %}"},
        {"{{ x ", "not closed"},
        {"{# never closed", "not closed"},
        {"{{ 'a\\N{DASH}' }}", "\\N{"},
        {"{{ x @ y }}", "unexpected character '@'"},
        {"{{ f()() }}", "called"},
        {"{% raw %}never closed", "endraw"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rlError err = {0};
        jjTemplate *t = jinja_load(cases[i].src, strlen(cases[i].src), "chat_template", &err);
        if (t) fail_msg("%s: loaded", cases[i].src);
        if (err.code != RL_EINPUT || !strstr(err.msg, cases[i].names) || !strstr(err.msg, "chat_template"))
            fail_msg("%s: message \"%s\" does not name %s", cases[i].src, err.msg, cases[i].names);
    }
    /* Bytes that are not UTF-8 text, and deep nesting, are refused too. */
    rlError err = {0};
    assert_null(jinja_load("{{ '\xff' }}", 8, "chat_template", &err));
    assert_non_null(strstr(err.msg, "UTF-8"));
    static char deep[200010];
    int k = 0;
    k += sprintf(deep, "{{ ");
    for (int i = 0; i < 100000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 100000; i++) deep[k++] = ')';
    sprintf(deep + k, " }}");
    assert_null(jinja_load(deep, strlen(deep), "chat_template", &err));
    if (!strstr(err.msg, "nests more than")) fail_msg("%s", err.msg);
}

/* Errors Python raises while rendering, with their messages. */
static void test_render_errors(void **state) {
    (void)state;
    static const struct { const char *src, *vars, *msg; } cases[] = {
        {"{{ raise_exception('no system role') }}", NULL, "no system role"},
        {"{{ messages[0].content + 1 }}", "{\"messages\": [{\"content\": \"a\"}]}", "concatenate"},
        {"{{ m.content.strip() }}", "{\"m\": {}}", "'dict object' has no attribute 'content'"},
        {"{{ x.y }}", NULL, "'x' is undefined"},
        {"{{ x|int }}", NULL, "'x' is undefined"},
        {"{{ m.zz|float(1.5) }}", "{\"m\": {}}", "'dict object' has no attribute 'zz'"},
        {"{{ x|indent }}", NULL, "'x' is undefined"},
        {"{{ 1 // 0 }}", NULL, "division by zero"},
        {"{% for a, b in [[1]] %}{% endfor %}", NULL, "not enough values to unpack"},
        {"{{ 9223372036854775807 + 1 }}", NULL, "integer overflow"},
        {"{{ x|tojson }}", NULL, "Undefined is not JSON serializable"},
        {"{{ 'a'.startswith }}", NULL, "printing it is not supported"},
        {"{{ range(100001)|length }}", NULL, "too big"},
        {"{% set x = 1 %}{% set x.a = 2 %}", NULL, "not a namespace"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rlError err = {0};
        char *out = render(cases[i].src, cases[i].vars, &err);
        if (out) fail_msg("%s: rendered '%s'", cases[i].src, out);
        if (err.code != RL_EINPUT || !strstr(err.msg, cases[i].msg))
            fail_msg("%s: message \"%s\" lacks \"%s\"", cases[i].src, err.msg, cases[i].msg);
    }
}

/* range() and slices at the ends of the 64-bit integers, as Python gives
 * them (the arithmetic overflowed: UBSan's report, and one item where
 * Python gives four). */
static void test_integer_edges(void **state) {
    (void)state;
    static const struct { const char *src, *want; } cases[] = {
        {"{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904)|list }}",
         "[-9223372036854775807, -4611686018427387903, 1, 4611686018427387905]"},
        {"{{ range(9223372036854775807, -9223372036854775807 - 1, -9223372036854775807 - 1)|list }}",
         "[9223372036854775807, -1]"},
        {"{{ range(5, 0, -9223372036854775807 - 1)|list }}", "[5]"},
        {"{{ 'abc'[::-9223372036854775807 - 1] }}|{{ [1, 2, 3][::9223372036854775807] }}|"
         "{{ [1, 2, 3][9223372036854775807:-9223372036854775807 - 1:-1] }}",
         "c|[1]|[3, 2, 1]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rlError err = {0};
        char *out = render(cases[i].src, NULL, &err);
        if (!out) fail_msg("%s: %s", cases[i].src, err.msg);
        assert_string_equal(out, cases[i].want);
        free(out);
    }
}

/* Hostile templates end with an error, quickly, in bounded memory. */
static void test_bounds(void **state) {
    (void)state;
    static const struct { const char *what, *src, *msg; } cases[] = {
        {"steps", "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", "steps"},
        {"memory", "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
                   "{% endfor %}", "MiB of memory"},
        {"output", "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "output is over"},
        {"recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested more than"},
        {"self-containing", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested more than"},
        /* Text built outside the arena stops at the bound too. */
        {"replace", "{{ ('x' * 10000000).replace('x', 'y' * 10000000)|length }}", "MiB of memory"},
        {"replace ''", "{{ ('x' * 10000000)|replace('', 'y' * 10000000)|length }}", "MiB of memory"},
        {"indent", "{{ 'x\\ny'|indent(1000000000) }}", "MiB of memory"},
        {"tojson indent", "{{ {'a': 1}|tojson(indent=1000000000) }}", "MiB of memory"},
        /* Lists that share their parts: 2^40 items to visit in 40 steps. */
#define SHARED(x) "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}" \
                  "{% set ns.b = [ns.b, ns.b] %}{% endfor %}" x
        {"shared ==", SHARED("{{ ns.a == ns.b }}"), "steps"},
        {"shared sort", SHARED("{{ [ns.a, ns.b]|sort }}"), "steps"},
        {"shared tojson", SHARED("{{ ns.a|tojson|length }}"), "steps"},
        {"shared print", SHARED("{{ ns.a|string|length }}"), "steps"},
        {"shared unique", SHARED("{{ [ns.a, ns.b]|unique|list }}"), "steps"},
        /* Nested 100,000 deep: no overflow of the C stack. */
#define DEEP(x) "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}" \
                "{% set ns.b = [ns.b] %}{% endfor %}" x
        {"deep ==", DEEP("{{ ns.a == ns.b }}"), "cannot be compared"},
        {"deep in", DEEP("{{ ns.a in [0, ns.b] }}"), "cannot be compared"},
        {"deep max", DEEP("{{ [ns.a, ns.b]|max }}"), "cannot be compared"},
        {"deep index", DEEP("{{ [ns.a].index(ns.b) }}"), "cannot be compared"},
        {"deep is eq", DEEP("{{ ns.a is eq ns.b }}"), "cannot be compared"},
        {"deep dict key", "{% set ns = namespace(a=(1,), b=(1,)) %}{% for i in range(100000) %}{% set ns.a = (ns.a,) %}"
                          "{% set ns.b = (ns.b,) %}{% endfor %}{{ {ns.a: 1}[ns.b] }}", "cannot be compared"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rlError err = {0};
        double t0 = now();
        char *out = render(cases[i].src, NULL, &err);
        double dt = now() - t0;
        printf("bound %-16s stopped in %.3f s: %s\n", cases[i].what, dt, err.msg);
        if (out) fail_msg("%s: rendered", cases[i].what);
        assert_non_null(strstr(err.msg, cases[i].msg));
        assert_true(dt < 5.0);
    }
    /* Wide indents are rendered as Python renders them, not cut short. */
    rlError werr = {0};
    char *wide = render("{{ 'x\\ny'|indent(2000)|length }} {{ {'a': 1}|tojson(indent=100)|length }}", NULL, &werr);
    if (!wide) fail_msg("%s", werr.msg);
    assert_string_equal(wide, "2003 110");
    free(wide);
    /* Tighter limits given by the caller apply. */
    jjLimits lim;
    jinja_limits_default(&lim);
    lim.max_output = 10;
    rlError err = {0};
    jjTemplate *t = jinja_load("{{ 'x' * 11 }}", 14, "t", &err);
    char *out;
    assert_non_null(t);
    assert_int_equal(jinja_render(t, NULL, &lim, &out, NULL, &err), -1);
    lim.max_output = 11;
    assert_int_equal(jinja_render(t, NULL, &lim, &out, NULL, &err), 0);
    free(out);
    jinja_free(t);
}

static void write_file(const char *p, const char *text) {
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *render_chat(rlChat *ch, const char *messages, const char *tools, rlError *err) {
    json_t *m = json_loads(messages, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL;
    char *text = NULL;
    size_t len;
    if (chat_render(ch, m, t, 1, NULL, &text, &len, err)) text = NULL;
    json_decref(m);
    json_decref(t);
    return text;
}

/* continue_final_message: the text cut after the final message, as
 * transformers cuts it (trailing whitespace kept where the template kept
 * it; the last text part of a list). */
static char *render_continued(rlChat *ch, const char *messages, rlError *err) {
    json_t *m = json_loads(messages, 0, NULL);
    char *text = NULL;
    size_t len;
    if (chat_render(ch, m, NULL, 0, NULL, &text, &len, err) || chat_continue_final(m, text, &len, err)) {
        free(text);
        text = NULL;
    } else
        assert_int_equal(strlen(text), len);
    json_decref(m);
    return text;
}

static void test_continue_final(void **state) {
    (void)state;
    rlError err = {0};
    rlChat *ch = chat_open(FIX("chat/demo"), &err);
    assert_non_null(ch);
    char *text = render_continued(ch, "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
                                      "\"content\": \"The answer is \"}]", &err);
    assert_non_null(text);
    assert_string_equal(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nThe answer is ");
    free(text);
    chat_free(ch);

    char dir[] = "/tmp/redlm-chat-XXXXXX", q[1100];
    assert_non_null(mkdtemp(dir));
    snprintf(q, sizeof(q), "%s/chat_template.jinja", dir);
    /* a template that trims the content: the cut falls after the stripped text */
    write_file(q, "{% for m in messages %}<{{ m.content | trim }}>{% endfor %}");
    assert_non_null(ch = chat_open(dir, &err));
    assert_non_null(text = render_continued(ch, "[{\"role\": \"user\", \"content\": \"x x \"}, "
                                                "{\"role\": \"assistant\", \"content\": \"  x \\n\"}]", &err));
    assert_string_equal(text, "<x x><x");
    free(text);
    /* the final message is nowhere in the text, or has no text */
    write_file(q, "{% for m in messages %}<{{ m.role }}>{% endfor %}");
    chat_free(ch);
    assert_non_null(ch = chat_open(dir, &err));
    assert_null(render_continued(ch, "[{\"role\": \"user\", \"content\": \"abc\"}]", &err));
    assert_int_equal(err.code, RL_EINPUT);
    assert_non_null(strstr(err.msg, "does not render the final message"));
    assert_null(render_continued(ch, "[{\"role\": \"user\", \"content\": null}]", &err));
    assert_non_null(strstr(err.msg, "no text to continue"));
    /* content parts: the last one with a text */
    write_file(q, "{% for m in messages %}[{% for p in m.content %}{{ p.text }}{% endfor %}]{% endfor %}");
    chat_free(ch);
    assert_non_null(ch = chat_open(dir, &err));
    assert_non_null(text = render_continued(ch, "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
                                                "\"text\": \"ab\"}, {\"type\": \"text\", \"text\": \"b\"}, "
                                                "{\"type\": \"image\"}]}]", &err));
    assert_string_equal(text, "[abb");
    free(text);
    chat_free(ch);
    unlink(q);
    rmdir(dir);
}

/* Where the template comes from, and what each source renders. */
static void test_template_files(void **state) {
    (void)state;
    rlError err = {0};
    const char *msgs = "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}]";
    /* The demo model's simple ChatML template, with its eos_token. */
    rlChat *ch = chat_open(FIX("chat/demo"), &err);
    assert_non_null(ch);
    char *text = render_chat(ch, msgs, NULL, &err);
    assert_non_null(text);
    assert_string_equal(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                              "<|im_start|>assistant\n");
    free(text);
    chat_free(ch);

    /* No template: the Qwen2.5 fallback, default system prompt included. */
    ch = chat_open(FIX("tokenizer-small"), &err);
    assert_non_null(ch);
    assert_non_null(strstr(chat_describe(ch), "built-in Qwen2.5"));
    text = render_chat(ch, "[{\"role\": \"user\", \"content\": \"Hi!\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}, "
                           "{\"role\": \"user\", \"content\": \"2+2?\"}]", NULL, &err);
    assert_non_null(text);
    assert_string_equal(text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                              "<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
                              "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    assert_null(render_chat(ch, "[]", NULL, &err));
    assert_int_equal(err.code, RL_EINPUT);
    assert_null(render_chat(ch, "\"hi\"", NULL, &err));
    assert_non_null(strstr(err.msg, "\"messages\" must be a non-empty array of message objects"));
    chat_free(ch);

    char dir[] = "/tmp/redlm-chat-XXXXXX", p[1100], q[1100];
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof(p), "%s/tokenizer_config.json", dir);
    snprintf(q, sizeof(q), "%s/chat_template.jinja", dir);
    /* Named templates: tool_use when tools are given, default otherwise;
     * special tokens as strings or AddedToken objects; bos_token null is
     * left undefined. */
    write_file(p, "{\"bos_token\": null, \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false},"
                  " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ eos_token }}\"},"
                  " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}\"}, {\"name\": \"rag\", \"template\": \"{% bad %}\"}]}");
    ch = chat_open(dir, &err);
    assert_non_null(ch);
    text = render_chat(ch, msgs, NULL, &err);
    assert_string_equal(text, "D</s>");
    free(text);
    text = render_chat(ch, msgs, "[{}, {}]", &err);
    assert_string_equal(text, "T2");
    free(text);
    chat_free(ch);
    /* chat_template.jinja wins over tokenizer_config.json, as in transformers. */
    write_file(q, "J{% for m in messages %}{{ m.role[0] }}{% endfor %}\n");
    ch = chat_open(dir, &err);
    assert_non_null(ch);
    assert_non_null(strstr(chat_describe(ch), "chat_template.jinja"));
    text = render_chat(ch, msgs, NULL, &err);
    assert_string_equal(text, "Jsu");
    free(text);
    chat_free(ch);
    /* A template using what the interpreter lacks: the model loads, every
     * render answers with the refusal. */
    write_file(q, "{% for m in messages %}{{ m.content | wordcount }}{% endfor %}");
    ch = chat_open(dir, &err);
    assert_non_null(ch);
    assert_non_null(chat_error(ch));
    assert_non_null(strstr(chat_describe(ch), "wordcount"));
    assert_null(render_chat(ch, msgs, NULL, &err));
    assert_int_equal(err.code, RL_EINPUT);
    assert_non_null(strstr(err.msg, "filter 'wordcount'"));
    chat_free(ch);
    unlink(q);
    /* A malformed tokenizer_config.json is the model's error. */
    write_file(p, "{\"chat_template\": 5}");
    assert_null(chat_open(dir, &err));
    assert_int_equal(err.code, RL_EMODEL);
    assert_non_null(strstr(err.msg, "chat_template"));
    write_file(p, "{not json");
    assert_null(chat_open(dir, &err));
    assert_int_equal(err.code, RL_EMODEL);
    assert_non_null(strstr(err.msg, "tokenizer_config.json"));
    unlink(p);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_fixture), cmocka_unit_test(test_jinja_cases),
        cmocka_unit_test(test_refusals),      cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_integer_edges), cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_template_files),
        cmocka_unit_test(test_continue_final),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
