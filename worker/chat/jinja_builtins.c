/* jinja_builtins.c: the tests (`is defined`, `is string`, ...) and global
 * functions (range, namespace, dict, raise_exception, strftime_now) a
 * template may use, as Jinja 3 defines them, and the argument binding every
 * builtin shares.  Filters are in jinja_filters.c, methods of str, dict,
 * list and loop in jinja_methods.c, Python's operators in jinja_ops.c.
 *
 * Each file ends with its table: the interpreter's vocabulary.  The parser
 * looks every name up there, so a name missing from them is refused at
 * load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "worker/chat/jinja_impl.h"

/* ---- arguments ---- */

int jj_bind(jjCtx *c, const char *what, jjArgs *a, const char *const *names, int n, jjValue **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (a->n_pos > n) {
        jj_fail(c, "%s takes at most %d argument%s (%d given)", what, n, n == 1 ? "" : "s", a->n_pos);
        return -1;
    }
    for (int i = 0; i < a->n_pos; i++) out[i] = a->pos[i];
    for (int k = 0; k < a->n_kw; k++) {
        int j = 0;
        while (j < n && strcmp(names[j], a->kw_names[k])) j++;
        if (j == n) {
            jj_fail(c, "%s got an unexpected keyword argument '%s'", what, a->kw_names[k]);
            return -1;
        }
        if (out[j]) {
            jj_fail(c, "%s got multiple values for argument '%s'", what, names[j]);
            return -1;
        }
        out[j] = a->kw[k];
    }
    return 0;
}

int jj_no_args(jjCtx *c, const char *what, jjArgs *a) {
    if (!a->n_pos && !a->n_kw) return 0;
    jj_fail(c, "%s takes no arguments", what);
    return -1;
}

jjValue *jj_want_str(jjCtx *c, const char *what, jjValue *v) {
    if (v->type == JV_STR) return v;
    if (v->type == JV_UNDEF) return jj_fail_undef(c, v);
    return jj_fail(c, "%s: expected a string, got %s", what, jj_type_name(v));
}

int jj_want_int(jjCtx *c, const char *what, jjValue *v, long long *out) {
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = v->type == JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    if (v->type == JV_UNDEF) jj_fail_undef(c, v);
    else jj_fail(c, "%s: expected an integer, got %s", what, jj_type_name(v));
    return -1;
}

jjValue *jj_from_buf(jjCtx *c, bytebuf *b, int bad) {
    jjValue *r = bad ? jj_fail(c, "out of memory") : jj_str(c, b->data ? b->data : "", b->len);
    bytebuf_free(b);
    return r;
}

/* ---- tests ---- */

static jjValue *t_defined(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type != JV_UNDEF); }
static jjValue *t_undefined(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_UNDEF); }
static jjValue *t_none(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_NONE); }
static jjValue *t_string(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_STR); }
static jjValue *t_mapping(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_DICT); }
static jjValue *t_number(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(jj_is_number(v)); }
static jjValue *t_integer(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_INT); }
static jjValue *t_float(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_FLOAT); }
static jjValue *t_boolean(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_BOOL); }
static jjValue *t_true(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_BOOL && v->u.b); }
static jjValue *t_false(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_BOOL && !v->u.b); }
static jjValue *t_callable(jjCtx *c, jjValue *v, jjArgs *a) { (void)c, (void)a; return jj_bool(v->type == JV_FUNC || v->type == JV_MACRO); }

static jjValue *t_sequence(jjCtx *c, jjValue *v, jjArgs *a) {
    (void)c, (void)a;
    return jj_bool(v->type == JV_STR || v->type == JV_LIST || v->type == JV_DICT);
}

static jjValue *t_iterable(jjCtx *c, jjValue *v, jjArgs *a) {
    (void)c, (void)a;
    return jj_bool(v->type == JV_STR || v->type == JV_LIST || v->type == JV_DICT || v->type == JV_UNDEF);
}

static jjValue *one_arg(jjCtx *c, const char *what, jjArgs *a) {
    if (a->n_pos != 1 || a->n_kw) return jj_fail(c, "the test '%s' takes one argument", what);
    return a->pos[0];
}

static jjValue *t_divisibleby(jjCtx *c, jjValue *v, jjArgs *a) {
    jjValue *n = one_arg(c, "divisibleby", a), *r;
    if (!n || !(r = jj_binop(c, "%", v, n))) return NULL;
    return jj_bool(!jj_truthy(r));
}

static jjValue *t_odd(jjCtx *c, jjValue *v, jjArgs *a) {
    (void)a;
    jjValue *two = jj_int(c, 2), *r = two ? jj_binop(c, "%", v, two) : NULL;
    return r ? jj_bool(jj_truthy(r)) : NULL;
}

static jjValue *t_even(jjCtx *c, jjValue *v, jjArgs *a) {
    jjValue *r = t_odd(c, v, a);
    return r ? jj_bool(!r->u.b) : NULL;
}

static jjValue *t_cmp(jjCtx *c, jjValue *v, jjArgs *a, const char *op) {
    jjValue *o = one_arg(c, op, a);
    if (!o) return NULL;
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        int eq = jj_equal(c, v, o);
        return jj_failed(c) ? NULL : jj_bool(op[0] == '=' ? eq : !eq);
    }
    int ok, r = jj_compare(c, v, o, &ok);
    if (jj_failed(c)) return NULL;
    if (!ok) return jj_fail(c, "'%s' not supported between instances of '%s' and '%s'", op, jj_type_name(v), jj_type_name(o));
    return jj_bool(op[0] == '<' ? (op[1] ? r <= 0 : r < 0) : (op[1] ? r >= 0 : r > 0));
}

static jjValue *t_eq(jjCtx *c, jjValue *v, jjArgs *a) { return t_cmp(c, v, a, "=="); }
static jjValue *t_ne(jjCtx *c, jjValue *v, jjArgs *a) { return t_cmp(c, v, a, "!="); }
static jjValue *t_lt(jjCtx *c, jjValue *v, jjArgs *a) { return t_cmp(c, v, a, "<"); }
static jjValue *t_le(jjCtx *c, jjValue *v, jjArgs *a) { return t_cmp(c, v, a, "<="); }
static jjValue *t_gt(jjCtx *c, jjValue *v, jjArgs *a) { return t_cmp(c, v, a, ">"); }
static jjValue *t_ge(jjCtx *c, jjValue *v, jjArgs *a) { return t_cmp(c, v, a, ">="); }

static jjValue *t_in(jjCtx *c, jjValue *v, jjArgs *a) {
    jjValue *seq = one_arg(c, "in", a);
    int r = seq ? jj_contains(c, seq, v) : -1;
    return r < 0 ? NULL : jj_bool(r);
}

static jjValue *t_sameas(jjCtx *c, jjValue *v, jjArgs *a) {
    jjValue *o = one_arg(c, "sameas", a);
    if (!o) return NULL;
    if (v->type == JV_NONE || v->type == JV_BOOL) return jj_bool(o->type == v->type && (v->type == JV_NONE || o->u.b == v->u.b));
    return jj_bool(v == o);
}

static jjValue *case_test(jjCtx *c, jjValue *v, int upper) {
    jjValue *s = jj_to_str(c, v);
    if (!s) return NULL;
    int cased = 0;
    for (size_t i = 0; i < s->u.s.len;) {
        int32_t cp;
        i += jj_utf8_decode(s->u.s.p + i, s->u.s.len - i, &cp);
        utf8proc_category_t k = utf8proc_category(cp);
        if (k == UTF8PROC_CATEGORY_LT || k == (upper ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU)) return jj_bool(0);
        if (k == (upper ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL)) cased = 1;
    }
    return jj_bool(cased);
}

static jjValue *t_lower(jjCtx *c, jjValue *v, jjArgs *a) { (void)a; return case_test(c, v, 0); }
static jjValue *t_upper(jjCtx *c, jjValue *v, jjArgs *a) { (void)a; return case_test(c, v, 1); }

jjValue *jj_run_test(jjCtx *c, const jjBuiltin *test, jjValue *v, jjArgs *a) {
    return test->fn(c, v, a);
}

/* ---- global functions ---- */

#define JJ_MAX_RANGE 100000   /* jinja2.sandbox.MAX_RANGE */

static jjValue *g_range(jjCtx *c, jjValue *self, jjArgs *a) {
    (void)self;
    long long x[3] = {0, 0, 1};
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3) return jj_fail(c, "range() takes 1 to 3 integers");
    for (int i = 0; i < a->n_pos; i++)
        if (jj_want_int(c, "range", a->pos[i], &x[a->n_pos == 1 ? 1 : i])) return NULL;
    if (x[2] == 0) return jj_fail(c, "range() arg 3 must not be zero");
    /* In unsigned arithmetic: the span of two 64-bit ints and the size of
     * the smallest step do not fit a long long. */
    typedef unsigned long long u64;
    u64 span = x[2] > 0 ? (x[1] > x[0] ? (u64)x[1] - (u64)x[0] : 0) : (x[0] > x[1] ? (u64)x[0] - (u64)x[1] : 0);
    u64 step = x[2] > 0 ? (u64)x[2] : (u64)-(x[2] + 1) + 1;
    u64 n = span ? (span - 1) / step + 1 : 0;
    if (n > JJ_MAX_RANGE) return jj_fail(c, "range of %llu items is too big (at most %d in a template)", n, JJ_MAX_RANGE);
    jjValue *l = jj_list(c, (size_t)n, 0);
    long long at = x[0];
    for (u64 i = 0; l && i < n; i++) {
        if (!(l->u.l.v[i] = jj_int(c, at))) return NULL;
        if (i + 1 < n) at += x[2];   /* stays between start and stop */
    }
    return l;
}

static jjValue *make_mapping(jjCtx *c, jjArgs *a, jjType type, const char *what) {
    jjValue *d = jj_dict(c);
    if (!d) return NULL;
    d->type = type;
    if (a->n_pos > 1) return jj_fail(c, "%s() takes at most one positional argument", what);
    if (a->n_pos) {
        jjValue *src = a->pos[0];
        if (src->type != JV_DICT) return jj_fail(c, "%s(): the positional argument must be a mapping", what);
        for (size_t i = 0; i < src->u.d.n; i++)
            if (jj_dict_set(c, d, src->u.d.k[i], src->u.d.v[i])) return NULL;
    }
    for (int k = 0; k < a->n_kw; k++) {
        jjValue *key = jj_cstr(c, a->kw_names[k]);
        if (!key || jj_dict_set(c, d, key, a->kw[k])) return NULL;
    }
    return d;
}

static jjValue *g_namespace(jjCtx *c, jjValue *self, jjArgs *a) {
    (void)self;
    return make_mapping(c, a, JV_NS, "namespace");
}

static jjValue *g_dict(jjCtx *c, jjValue *self, jjArgs *a) {
    (void)self;
    return make_mapping(c, a, JV_DICT, "dict");
}

static jjValue *g_raise_exception(jjCtx *c, jjValue *self, jjArgs *a) {
    (void)self;
    jjValue *msg = a->n_pos ? jj_to_str(c, a->pos[0]) : NULL;
    if (a->n_pos && !msg) return NULL;
    return jj_fail(c, "the template raised an error: %.*s", msg ? (int)(msg->u.s.len > 1500 ? 1500 : msg->u.s.len) : 0,
                   msg ? msg->u.s.p : "");
}

static jjValue *g_strftime_now(jjCtx *c, jjValue *self, jjArgs *a) {
    (void)self;
    if (a->n_pos != 1 || a->n_kw || !jj_want_str(c, "strftime_now", a->pos[0]))
        return a->n_pos == 1 && !a->n_kw ? NULL : jj_fail(c, "strftime_now() takes one format string");
    char fmt[256], out[512];
    snprintf(fmt, sizeof(fmt), "%.*s", (int)(a->pos[0]->u.s.len < 255 ? a->pos[0]->u.s.len : 255), a->pos[0]->u.s.p);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t n = strftime(out, sizeof(out), fmt, &tm);
    return jj_str(c, out, n);
}

/* ---- tables ---- */

static const jjBuiltin TESTS[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"string", t_string},
    {"mapping", t_mapping}, {"sequence", t_sequence}, {"iterable", t_iterable}, {"number", t_number},
    {"integer", t_integer}, {"float", t_float}, {"boolean", t_boolean}, {"true", t_true},
    {"false", t_false}, {"callable", t_callable}, {"odd", t_odd}, {"even", t_even},
    {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"ne", t_ne}, {"lt", t_lt},
    {"lessthan", t_lt}, {"le", t_le}, {"gt", t_gt}, {"greaterthan", t_gt}, {"ge", t_ge}, {"in", t_in},
    {"sameas", t_sameas}, {"lower", t_lower}, {"upper", t_upper}, {NULL, NULL}};

static const jjBuiltin GLOBALS[] = {
    {"range", g_range}, {"namespace", g_namespace}, {"dict", g_dict},
    {"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now}, {NULL, NULL}};

const jjBuiltin *jj_find_builtin(const jjBuiltin *table, const char *name) {
    for (; table->name; table++)
        if (!strcmp(table->name, name)) return table;
    return NULL;
}

const jjBuiltin *jj_find_test(const char *name) { return jj_find_builtin(TESTS, name); }
const jjBuiltin *jj_find_global(const char *name) { return jj_find_builtin(GLOBALS, name); }
