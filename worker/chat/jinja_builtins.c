/* jinja_builtins.c: the filters, tests, global functions and methods a
 * template may use, each as Jinja 3 / Python 3 define it, and Python's
 * operators and attribute rules (jinja2's sandboxed getattr: a dict's
 * methods before its keys, a missing attribute undefined rather than an
 * error).
 *
 * The tables at the end are the interpreter's vocabulary: the parser looks
 * every name up there, so a name missing from them is refused at load. */
#include <limits.h>
#include <math.h>
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

#define BIND(what, ...)                                                                 \
    static const char *const names_[] = {__VA_ARGS__};                                  \
    enum { N_ = sizeof(names_) / sizeof(names_[0]) };                                   \
    jjValue *arg[N_];                                                                   \
    if (jj_bind(c, what, a, names_, N_, arg)) return NULL

static int no_args(jjCtx *c, const char *what, jjArgs *a) {
    if (!a->n_pos && !a->n_kw) return 0;
    jj_fail(c, "%s takes no arguments", what);
    return -1;
}

static jjValue *want_str(jjCtx *c, const char *what, jjValue *v) {
    if (v->type == JV_STR) return v;
    if (v->type == JV_UNDEF) return jj_fail_undef(c, v);
    return jj_fail(c, "%s: expected a string, got %s", what, jj_type_name(v));
}

static int want_int(jjCtx *c, const char *what, jjValue *v, long long *out) {
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = v->type == JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    if (v->type == JV_UNDEF) jj_fail_undef(c, v);
    else jj_fail(c, "%s: expected an integer, got %s", what, jj_type_name(v));
    return -1;
}

static jjValue *str_of(jjCtx *c, jjValue *v) {   /* Jinja's soft_str */
    return jj_to_str(c, v);
}

static jjValue *from_buf(jjCtx *c, bytebuf *b, int bad) {
    jjValue *r = bad ? jj_fail(c, "out of memory") : jj_str(c, b->data ? b->data : "", b->len);
    bytebuf_free(b);
    return r;
}

/* ---- Python operators ---- */

static jjValue *num_result(jjCtx *c, const char *op, jjValue *a, jjValue *b) {
    int ints = a->type != JV_FLOAT && b->type != JV_FLOAT;
    long long x = a->type == JV_INT ? a->u.i : a->type == JV_BOOL ? a->u.b : 0;
    long long y = b->type == JV_INT ? b->u.i : b->type == JV_BOOL ? b->u.b : 0;
    double fx = jj_as_double(a), fy = jj_as_double(b);
    long long r;
    switch (op[0]) {
    case '+':
        if (!ints) return jj_float(c, fx + fy);
        if (__builtin_add_overflow(x, y, &r)) break;
        return jj_int(c, r);
    case '-':
        if (!ints) return jj_float(c, fx - fy);
        if (__builtin_sub_overflow(x, y, &r)) break;
        return jj_int(c, r);
    case '*':
        if (op[1] == '*') {
            if (ints && y >= 0) {
                long long acc = 1;
                for (long long k = 0; k < y; k++) {
                    if (__builtin_mul_overflow(acc, x, &acc)) return jj_fail(c, "integer overflow in **");
                    if (acc == 0 || acc == 1) break;
                }
                if (acc == -1 || acc == 1) acc = (x == -1 && (y & 1)) ? -1 : (x == -1 ? 1 : acc);
                return jj_int(c, acc);
            }
            if (fx == 0 && fy < 0) return jj_fail(c, "0.0 cannot be raised to a negative power");
            return jj_float(c, pow(fx, fy));
        }
        if (!ints) return jj_float(c, fx * fy);
        if (__builtin_mul_overflow(x, y, &r)) break;
        return jj_int(c, r);
    case '/':
        if (fy == 0) return jj_fail(c, "division by zero");
        if (op[1] != '/') return jj_float(c, fx / fy);
        if (!ints) return jj_float(c, floor(fx / fy));
        if (x == LLONG_MIN && y == -1) break;
        r = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
        return jj_int(c, r);
    case '%':
        if (fy == 0) return jj_fail(c, "modulo by zero");
        if (!ints) {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            return jj_float(c, m);
        }
        if (y == -1) return jj_int(c, 0);
        r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return jj_int(c, r);
    }
    return jj_fail(c, "integer overflow in %s", op);
}

static jjValue *repeat(jjCtx *c, jjValue *seq, long long times) {
    if (times < 0) times = 0;
    if (seq->type == JV_STR) {
        if (seq->u.s.len && (unsigned long long)times > c->lim->max_memory / seq->u.s.len)
            return jj_fail(c, "a string repeated %lld times is over the memory limit", times);
        size_t n = seq->u.s.len * (size_t)times;
        jjValue *r = jj_str(c, NULL, 0);
        char *s = r ? jj_ctx_alloc(c, n + 1) : NULL;
        if (!s) return NULL;
        for (size_t at = 0; at < n; at += seq->u.s.len) memcpy(s + at, seq->u.s.p, seq->u.s.len);
        r->u.s.p = s;
        r->u.s.len = n;
        return r;
    }
    if (seq->u.l.n && (unsigned long long)times > c->lim->max_memory / (seq->u.l.n * sizeof(void *)))
        return jj_fail(c, "a list repeated %lld times is over the memory limit", times);
    jjValue *r = jj_list(c, seq->u.l.n * (size_t)times, seq->u.l.tuple);
    for (size_t i = 0; r && i < r->u.l.n; i++) r->u.l.v[i] = seq->u.l.v[i % seq->u.l.n];
    return r;
}

jjValue *jj_binop(jjCtx *c, const char *op, jjValue *a, jjValue *b) {
    if (op[0] == '~') {
        jjValue *x = str_of(c, a), *y = x ? str_of(c, b) : NULL;
        if (!y) return NULL;
        jjValue *r = jj_str(c, NULL, 0);
        char *s = r ? jj_ctx_alloc(c, x->u.s.len + y->u.s.len + 1) : NULL;
        if (!s) return NULL;
        memcpy(s, x->u.s.p, x->u.s.len);
        memcpy(s + x->u.s.len, y->u.s.p, y->u.s.len);
        r->u.s.p = s;
        r->u.s.len = x->u.s.len + y->u.s.len;
        return r;
    }
    if (a->type == JV_UNDEF) return jj_fail_undef(c, a);
    if (b->type == JV_UNDEF) return jj_fail_undef(c, b);
    if (jj_is_number(a) && jj_is_number(b)) return num_result(c, op, a, b);
    if (!strcmp(op, "+") && a->type == JV_STR && b->type == JV_STR) return jj_binop(c, "~", a, b);
    if (!strcmp(op, "+") && a->type == JV_LIST && b->type == JV_LIST && a->u.l.tuple == b->u.l.tuple) {
        jjValue *r = jj_list(c, a->u.l.n + b->u.l.n, a->u.l.tuple);
        if (!r) return NULL;
        if (a->u.l.n) memcpy(r->u.l.v, a->u.l.v, a->u.l.n * sizeof(jjValue *));
        if (b->u.l.n) memcpy(r->u.l.v + a->u.l.n, b->u.l.v, b->u.l.n * sizeof(jjValue *));
        return r;
    }
    if (!strcmp(op, "*") && (a->type == JV_STR || a->type == JV_LIST) && (b->type == JV_INT || b->type == JV_BOOL))
        return repeat(c, a, b->type == JV_INT ? b->u.i : b->u.b);
    if (!strcmp(op, "*") && (b->type == JV_STR || b->type == JV_LIST) && (a->type == JV_INT || a->type == JV_BOOL))
        return repeat(c, b, a->type == JV_INT ? a->u.i : a->u.b);
    if (!strcmp(op, "%") && a->type == JV_STR) return jj_fail(c, "string formatting with '%%' is not supported");
    if (!strcmp(op, "+") && a->type == JV_STR)
        return jj_fail(c, "can only concatenate str (not \"%s\") to str", jj_type_name(b));
    return jj_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jj_type_name(a), jj_type_name(b));
}

static jjValue *bound(jjCtx *c, const jjBuiltin *fn, jjValue *self) {
    jjValue *v = jj_ctx_alloc(c, sizeof(*v));
    if (v) {
        v->type = JV_FUNC;
        v->u.fn.fn = fn;
        v->u.fn.self = self;
    }
    return v;
}

static jjValue *loop_attr(jjCtx *c, jjValue *lv, const char *name) {
    const jjLoop *l = lv->u.loop;
    long long i = (long long)l->i, n = (long long)l->n;
    if (!strcmp(name, "index")) return jj_int(c, i + 1);
    if (!strcmp(name, "index0")) return jj_int(c, i);
    if (!strcmp(name, "revindex")) return jj_int(c, n - i);
    if (!strcmp(name, "revindex0")) return jj_int(c, n - i - 1);
    if (!strcmp(name, "first")) return jj_bool(i == 0);
    if (!strcmp(name, "last")) return jj_bool(i == n - 1);
    if (!strcmp(name, "length")) return jj_int(c, n);
    if (!strcmp(name, "depth")) return jj_int(c, 1);
    if (!strcmp(name, "depth0")) return jj_int(c, 0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->items[i - 1] : jj_undef(c, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->items[i + 1] : jj_undef(c, "there is no next item");
    const jjBuiltin *m = jj_find_method(lv, name);
    return m ? bound(c, m, lv) : jj_undeff(c, "'LoopContext' object has no attribute '%s'", name);
}

jjValue *jj_getattr(jjCtx *c, jjValue *obj, const char *name) {
    const jjBuiltin *m;
    switch (obj->type) {
    case JV_UNDEF: return jj_fail_undef(c, obj);
    case JV_DICT:
        if (jj_dict_attr_is_method(name)) {
            m = jj_find_method(obj, name);
            return m ? bound(c, m, obj) : jj_undeff(c, "dict.%s is not available in a template", name);
        }
        /* fall through */
    case JV_NS: {
        jjValue *v = jj_dict_get(obj, name, strlen(name));
        return v ? v : jj_undeff(c, "'%s object' has no attribute '%s'", obj->type == JV_NS ? "Namespace" : "dict", name);
    }
    case JV_LOOP: return loop_attr(c, obj, name);
    case JV_NONE: return jj_undeff(c, "'None' has no attribute '%s'", name);
    default:
        if ((m = jj_find_method(obj, name))) return bound(c, m, obj);
        return jj_undeff(c, "'%s object' has no attribute '%s'", jj_type_name(obj), name);
    }
}

jjValue *jj_getitem(jjCtx *c, jjValue *obj, jjValue *key) {
    if (obj->type == JV_UNDEF) return jj_fail_undef(c, obj);
    if ((obj->type == JV_LIST || obj->type == JV_STR) && (key->type == JV_INT || key->type == JV_BOOL)) {
        long long i = key->type == JV_INT ? key->u.i : key->u.b;
        long long n = obj->type == JV_LIST ? (long long)obj->u.l.n : (long long)jj_utf8_len(obj->u.s.p, obj->u.s.len);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return jj_undeff(c, "'%s object' has no element %lld", jj_type_name(obj), i);
        if (obj->type == JV_LIST) return obj->u.l.v[i];
        size_t at = jj_utf8_offset(obj->u.s.p, obj->u.s.len, (size_t)i);
        int32_t cp;
        return jj_str(c, obj->u.s.p + at, jj_utf8_decode(obj->u.s.p + at, obj->u.s.len - at, &cp));
    }
    if (obj->type == JV_DICT || obj->type == JV_NS) {
        jjValue *v = jj_dict_lookup(obj, key);
        if (v) return v;
    }
    if (key->type == JV_STR && obj->type != JV_NONE) {
        char name[128];
        if (key->u.s.len < sizeof(name) && !memchr(key->u.s.p, 0, key->u.s.len)) {
            memcpy(name, key->u.s.p, key->u.s.len);
            name[key->u.s.len] = 0;
            if (obj->type != JV_DICT || jj_dict_attr_is_method(name)) return jj_getattr(c, obj, name);
        }
        return jj_undeff(c, "'%s object' has no attribute '%.*s'", jj_type_name(obj), (int)(key->u.s.len > 60 ? 60 : key->u.s.len),
                         key->u.s.p);
    }
    return jj_undeff(c, "'%s object' has no element of that key", jj_type_name(obj));
}

int jj_contains(jjCtx *c, jjValue *container, jjValue *item) {
    switch (container->type) {
    case JV_STR:
        if (item->type != JV_STR) {
            if (item->type == JV_UNDEF) jj_fail_undef(c, item);
            else jj_fail(c, "'in <string>' requires string as left operand, not %s", jj_type_name(item));
            return -1;
        }
        if (!item->u.s.len) return 1;
        return memmem(container->u.s.p, container->u.s.len, item->u.s.p, item->u.s.len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < container->u.l.n; i++)
            if (jj_equal(container->u.l.v[i], item)) return 1;
        return 0;
    case JV_DICT: case JV_NS: return jj_dict_lookup(container, item) != NULL;
    case JV_UNDEF: return 0;
    default:
        jj_fail(c, "argument of type '%s' is not iterable", jj_type_name(container));
        return -1;
    }
}

jjValue *jj_iterate(jjCtx *c, jjValue *v) {
    switch (v->type) {
    case JV_LIST: return v;
    case JV_UNDEF: return jj_list(c, 0, 0);
    case JV_DICT: case JV_NS: {
        jjValue *l = jj_list(c, v->u.d.n, 0);
        for (size_t i = 0; l && i < v->u.d.n; i++) l->u.l.v[i] = v->u.d.k[i];
        return l;
    }
    case JV_STR: {
        jjValue *l = jj_list(c, jj_utf8_len(v->u.s.p, v->u.s.len), 0);
        for (size_t i = 0, k = 0; l && i < v->u.s.len; k++) {
            int32_t cp;
            size_t n = jj_utf8_decode(v->u.s.p + i, v->u.s.len - i, &cp);
            if (!(l->u.l.v[k] = jj_str(c, v->u.s.p + i, n))) return NULL;
            i += n;
        }
        return l;
    }
    default: return jj_fail(c, "'%s' object is not iterable", jj_type_name(v));
    }
}

/* ---- string helpers (by code point) ---- */

typedef int32_t (*caseFn)(int32_t);

static int32_t to_lower(int32_t cp) { return utf8proc_tolower(cp); }
static int32_t to_upper(int32_t cp) { return utf8proc_toupper(cp); }
static int32_t to_title(int32_t cp) { return utf8proc_totitle(cp); }

static int put_cp(bytebuf *b, int32_t cp) {
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t n = utf8proc_encode_char(cp, u);
    return bytebuf_append(b, u, (size_t)n);
}

/* Python's str.upper()/lower() use Unicode's full case mappings, where a
 * few characters become several (SpecialCasing.txt, unconditional part;
 * the Greek iota-subscript forms are not listed and map one to one). */
static const struct { int32_t cp; const char *upper; } FULL_UPPER[] = {
    {0xDF, "SS"}, {0x149, "\u02BCN"}, {0x1F0, "J\u030C"}, {0x390, "\u0399\u0308\u0301"},
    {0x3B0, "\u03A5\u0308\u0301"}, {0x587, "\u0535\u0552"}, {0x1E96, "H\u0331"}, {0x1E97, "T\u0308"},
    {0x1E98, "W\u030A"}, {0x1E99, "Y\u030A"}, {0x1E9A, "A\u02BE"}, {0xFB00, "FF"}, {0xFB01, "FI"},
    {0xFB02, "FL"}, {0xFB03, "FFI"}, {0xFB04, "FFL"}, {0xFB05, "ST"}, {0xFB06, "ST"},
    {0xFB13, "\u0544\u0546"}, {0xFB14, "\u0544\u0535"}, {0xFB15, "\u0544\u053B"}, {0xFB16, "\u054E\u0546"},
    {0xFB17, "\u0544\u053D"}, {0, NULL}};

static int put_case(bytebuf *b, int32_t cp, caseFn f) {
    if (f == to_upper)
        for (int i = 0; FULL_UPPER[i].upper; i++)
            if (FULL_UPPER[i].cp == cp) return bytebuf_append(b, FULL_UPPER[i].upper, strlen(FULL_UPPER[i].upper));
    if (f == to_lower && cp == 0x130) return bytebuf_append(b, "i\u0307", 3);
    return put_cp(b, f(cp));
}

static int is_cased(int32_t cp) {
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* mode 0: every char with f; 1: title(); 2: capitalize(). */
static jjValue *str_case(jjCtx *c, jjValue *s, caseFn f, int mode) {
    bytebuf b = {0};
    int bad = 0, prev_cased = 0;
    for (size_t i = 0, k = 0; i < s->u.s.len && !bad; k++) {
        int32_t cp;
        i += jj_utf8_decode(s->u.s.p + i, s->u.s.len - i, &cp);
        caseFn g = mode == 0 ? f : mode == 1 ? (prev_cased ? to_lower : to_title) : (k == 0 ? to_title : to_lower);
        prev_cased = is_cased(cp);
        bad = put_case(&b, cp, g);
    }
    return from_buf(c, &b, bad);
}

/* A set of code points (strip's chars); NULL means whitespace. */
static int in_chars(int32_t cp, const jjValue *chars) {
    if (!chars) return jj_isspace(cp);
    for (size_t i = 0; i < chars->u.s.len;) {
        int32_t x;
        i += jj_utf8_decode(chars->u.s.p + i, chars->u.s.len - i, &x);
        if (x == cp) return 1;
    }
    return 0;
}

static size_t prev_cp(const char *p, size_t at) {
    do at--;
    while (at > 0 && ((unsigned char)p[at] & 0xC0) == 0x80);
    return at;
}

static jjValue *str_strip(jjCtx *c, jjValue *s, const jjValue *chars, int left, int right) {
    size_t lo = 0, hi = s->u.s.len;
    int32_t cp;
    while (left && lo < hi) {
        size_t k = jj_utf8_decode(s->u.s.p + lo, hi - lo, &cp);
        if (!in_chars(cp, chars)) break;
        lo += k;
    }
    while (right && hi > lo) {
        size_t at = prev_cp(s->u.s.p, hi);
        jj_utf8_decode(s->u.s.p + at, hi - at, &cp);
        if (!in_chars(cp, chars)) break;
        hi = at;
    }
    if (lo == 0 && hi == s->u.s.len) return s;
    return jj_str(c, s->u.s.p + lo, hi - lo);
}

static jjValue *list_push_str(jjCtx *c, jjValue *l, const char *p, size_t n) {
    jjValue *s = jj_str(c, p, n);
    if (!s) return NULL;
    if (l->u.l.n % 16 == 0) {
        jjValue **v = jj_ctx_alloc(c, (l->u.l.n + 16) * sizeof(*v));
        if (!v) return NULL;
        if (l->u.l.n) memcpy(v, l->u.l.v, l->u.l.n * sizeof(*v));
        l->u.l.v = v;
    }
    l->u.l.v[l->u.l.n++] = s;
    return l;
}

/* str.split / str.rsplit. */
static jjValue *str_split(jjCtx *c, jjValue *s, jjValue *sep, long long maxsplit, int from_right) {
    jjValue *l = jj_list(c, 0, 0);
    if (!l) return NULL;
    const char *p = s->u.s.p;
    size_t n = s->u.s.len;
    if (sep && sep->u.s.len == 0) return jj_fail(c, "split: empty separator");
    jjValue *parts = l;
    if (!sep) {
        /* Runs of whitespace; none at either end. */
        size_t i = 0;
        int32_t cp;
        long long splits = 0;
        if (!from_right) {
            for (;;) {
                while (i < n && jj_isspace((int32_t)(jj_utf8_decode(p + i, n - i, &cp), cp))) i += jj_utf8_decode(p + i, n - i, &cp);
                if (i >= n) break;
                size_t start = i;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    /* The rest as is, trailing whitespace included. */
                    if (!list_push_str(c, parts, p + start, n - start)) return NULL;
                    break;
                }
                while (i < n && !jj_isspace((int32_t)(jj_utf8_decode(p + i, n - i, &cp), cp))) i += jj_utf8_decode(p + i, n - i, &cp);
                if (!list_push_str(c, parts, p + start, i - start)) return NULL;
                splits++;
            }
            return parts;
        }
        /* rsplit(None, k): collect from the right, then reverse. */
        size_t end = n;
        for (;;) {
            while (end > 0) {
                size_t at = prev_cp(p, end);
                jj_utf8_decode(p + at, end - at, &cp);
                if (!jj_isspace(cp)) break;
                end = at;
            }
            if (end == 0) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                if (!list_push_str(c, parts, p, end)) return NULL;
                break;
            }
            size_t start = end;
            while (start > 0) {
                size_t at = prev_cp(p, start);
                jj_utf8_decode(p + at, start - at, &cp);
                if (jj_isspace(cp)) break;
                start = at;
            }
            if (!list_push_str(c, parts, p + start, end - start)) return NULL;
            end = start;
            splits++;
        }
    } else {
        const char *q = sep->u.s.p;
        size_t m = sep->u.s.len;
        long long splits = 0;
        if (!from_right) {
            size_t start = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(p + start, n - start, q, m) : NULL;
                if (!hit) {
                    if (!list_push_str(c, parts, p + start, n - start)) return NULL;
                    return parts;
                }
                if (!list_push_str(c, parts, p + start, (size_t)(hit - (p + start)))) return NULL;
                start = (size_t)(hit - p) + m;
                splits++;
            }
        }
        size_t end = n;
        for (;;) {
            size_t hit = (size_t)-1;
            if ((maxsplit < 0 || splits < maxsplit) && end >= m)
                for (size_t at = end - m + 1; at-- > 0;)
                    if (!memcmp(p + at, q, m)) {
                        hit = at;
                        break;
                    }
            if (hit == (size_t)-1) {
                if (!list_push_str(c, parts, p, end)) return NULL;
                break;
            }
            if (!list_push_str(c, parts, p + hit + m, end - hit - m)) return NULL;
            end = hit;
            splits++;
        }
    }
    for (size_t i = 0, j = parts->u.l.n; i + 1 < j; i++, j--) {
        jjValue *t = parts->u.l.v[i];
        parts->u.l.v[i] = parts->u.l.v[j - 1];
        parts->u.l.v[j - 1] = t;
    }
    return parts;
}

static jjValue *str_replace(jjCtx *c, jjValue *s, jjValue *old, jjValue *new_, long long count) {
    bytebuf b = {0};
    int bad = 0;
    long long done = 0;
    if (!old->u.s.len) {
        /* Python puts `new` before every character and at the end. */
        for (size_t i = 0; i <= s->u.s.len && !bad;) {
            if (count < 0 || done < count) {
                bad = bytebuf_append(&b, new_->u.s.p, new_->u.s.len);
                done++;
            }
            if (i == s->u.s.len) break;
            int32_t cp;
            size_t k = jj_utf8_decode(s->u.s.p + i, s->u.s.len - i, &cp);
            bad = bad || bytebuf_append(&b, s->u.s.p + i, k);
            i += k;
        }
        return from_buf(c, &b, bad);
    }
    size_t i = 0;
    while (!bad) {
        const char *hit = (count < 0 || done < count) ? memmem(s->u.s.p + i, s->u.s.len - i, old->u.s.p, old->u.s.len) : NULL;
        if (!hit) {
            bad = bytebuf_append(&b, s->u.s.p + i, s->u.s.len - i);
            break;
        }
        size_t at = (size_t)(hit - s->u.s.p);
        bad = bytebuf_append(&b, s->u.s.p + i, at - i) || bytebuf_append(&b, new_->u.s.p, new_->u.s.len);
        i = at + old->u.s.len;
        done++;
    }
    return from_buf(c, &b, bad);
}

/* str.splitlines(): the line boundaries Python knows. */
static jjValue *str_splitlines(jjCtx *c, jjValue *s, int keepends) {
    jjValue *l = jj_list(c, 0, 0);
    const char *p = s->u.s.p;
    size_t n = s->u.s.len, start = 0, i = 0;
    while (l && i < n) {
        int32_t cp;
        size_t k = jj_utf8_decode(p + i, n - i, &cp);
        int nl = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                 cp == 0x2028 || cp == 0x2029;
        if (!nl) {
            i += k;
            continue;
        }
        size_t end = i;
        i += k;
        if (cp == '\r' && i < n && p[i] == '\n') i++;
        if (!list_push_str(c, l, p + start, (keepends ? i : end) - start)) return NULL;
        start = i;
    }
    if (l && start < n && !list_push_str(c, l, p + start, n - start)) return NULL;
    return l;
}

/* ---- methods ---- */

static jjValue *m_startswith(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("startswith", "prefix");
    if (!arg[0]) return jj_fail(c, "startswith() takes one argument");
    int ends = 0;
    jjValue *opts = arg[0]->type == JV_LIST && arg[0]->u.l.tuple ? arg[0] : NULL;
    size_t n = opts ? opts->u.l.n : 1;
    for (size_t i = 0; i < n; i++) {
        jjValue *x = opts ? opts->u.l.v[i] : arg[0];
        if (!want_str(c, "startswith", x)) return NULL;
        if (x->u.s.len <= self->u.s.len && !memcmp(self->u.s.p, x->u.s.p, x->u.s.len)) ends = 1;
    }
    return jj_bool(ends);
}

static jjValue *m_endswith(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("endswith", "suffix");
    if (!arg[0]) return jj_fail(c, "endswith() takes one argument");
    jjValue *opts = arg[0]->type == JV_LIST && arg[0]->u.l.tuple ? arg[0] : NULL;
    size_t n = opts ? opts->u.l.n : 1;
    int ends = 0;
    for (size_t i = 0; i < n; i++) {
        jjValue *x = opts ? opts->u.l.v[i] : arg[0];
        if (!want_str(c, "endswith", x)) return NULL;
        if (x->u.s.len <= self->u.s.len && !memcmp(self->u.s.p + self->u.s.len - x->u.s.len, x->u.s.p, x->u.s.len))
            ends = 1;
    }
    return jj_bool(ends);
}

static jjValue *split_common(jjCtx *c, jjValue *self, jjArgs *a, int right) {
    BIND(right ? "rsplit" : "split", "sep", "maxsplit");
    long long maxsplit = -1;
    jjValue *sep = arg[0] && arg[0]->type != JV_NONE ? arg[0] : NULL;
    if (sep && !want_str(c, "split", sep)) return NULL;
    if (arg[1] && want_int(c, "split", arg[1], &maxsplit)) return NULL;
    return str_split(c, self, sep, maxsplit, right);
}

static jjValue *m_split(jjCtx *c, jjValue *self, jjArgs *a) { return split_common(c, self, a, 0); }
static jjValue *m_rsplit(jjCtx *c, jjValue *self, jjArgs *a) { return split_common(c, self, a, 1); }

static jjValue *strip_common(jjCtx *c, jjValue *self, jjArgs *a, int left, int right) {
    BIND("strip", "chars");
    jjValue *chars = arg[0] && arg[0]->type != JV_NONE ? arg[0] : NULL;
    if (chars && !want_str(c, "strip", chars)) return NULL;
    return str_strip(c, self, chars, left, right);
}

static jjValue *m_strip(jjCtx *c, jjValue *self, jjArgs *a) { return strip_common(c, self, a, 1, 1); }
static jjValue *m_lstrip(jjCtx *c, jjValue *self, jjArgs *a) { return strip_common(c, self, a, 1, 0); }
static jjValue *m_rstrip(jjCtx *c, jjValue *self, jjArgs *a) { return strip_common(c, self, a, 0, 1); }

static jjValue *m_replace(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("replace", "old", "new", "count");
    long long count = -1;
    if (!arg[0] || !arg[1]) return jj_fail(c, "replace() takes the old and the new string");
    if (!want_str(c, "replace", arg[0]) || !want_str(c, "replace", arg[1])) return NULL;
    if (arg[2] && want_int(c, "replace", arg[2], &count)) return NULL;
    return str_replace(c, self, arg[0], arg[1], count);
}

static jjValue *m_lower(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "lower", a)) return NULL;
    return str_case(c, self, to_lower, 0);
}

static jjValue *m_upper(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "upper", a)) return NULL;
    return str_case(c, self, to_upper, 0);
}

static jjValue *m_title(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "title", a)) return NULL;
    return str_case(c, self, NULL, 1);
}

static jjValue *m_capitalize(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "capitalize", a)) return NULL;
    return str_case(c, self, NULL, 2);
}

static jjValue *m_find(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("find", "sub");
    if (!arg[0] || !want_str(c, "find", arg[0])) return arg[0] ? NULL : jj_fail(c, "find() takes one argument");
    const char *hit = memmem(self->u.s.p, self->u.s.len, arg[0]->u.s.p, arg[0]->u.s.len);
    if (!arg[0]->u.s.len) hit = self->u.s.p;
    return jj_int(c, hit ? (long long)jj_utf8_len(self->u.s.p, (size_t)(hit - self->u.s.p)) : -1);
}

static jjValue *m_count(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("count", "x");
    if (!arg[0]) return jj_fail(c, "count() takes one argument");
    long long k = 0;
    if (self->type == JV_LIST) {
        for (size_t i = 0; i < self->u.l.n; i++) k += jj_equal(self->u.l.v[i], arg[0]);
        return jj_int(c, k);
    }
    if (!want_str(c, "count", arg[0])) return NULL;
    if (!arg[0]->u.s.len) return jj_int(c, (long long)jj_utf8_len(self->u.s.p, self->u.s.len) + 1);
    for (size_t i = 0;;) {
        const char *hit = memmem(self->u.s.p + i, self->u.s.len - i, arg[0]->u.s.p, arg[0]->u.s.len);
        if (!hit) break;
        k++;
        i = (size_t)(hit - self->u.s.p) + arg[0]->u.s.len;
    }
    return jj_int(c, k);
}

static jjValue *join_items(jjCtx *c, jjValue *items, const char *sep, size_t sep_len, int strict) {
    bytebuf b = {0};
    int bad = 0;
    for (size_t i = 0; i < items->u.l.n && !bad; i++) {
        jjValue *x = items->u.l.v[i];
        if (strict && x->type != JV_STR) {
            bytebuf_free(&b);
            return jj_fail(c, "sequence item %zu: expected str instance, %s found", i, jj_type_name(x));
        }
        if (i) bad = bytebuf_append(&b, sep, sep_len);
        if (!bad) bad = x->type == JV_STR ? bytebuf_append(&b, x->u.s.p, x->u.s.len) : jj_write_str(c, &b, x);
        if (bad && jj_failed(c)) {
            bytebuf_free(&b);
            return NULL;
        }
    }
    return from_buf(c, &b, bad);
}

static jjValue *m_join(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("join", "iterable");
    jjValue *items = arg[0] ? jj_iterate(c, arg[0]) : jj_fail(c, "join() takes one argument");
    return items ? join_items(c, items, self->u.s.p, self->u.s.len, 1) : NULL;
}

static jjValue *m_splitlines(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("splitlines", "keepends");
    return str_splitlines(c, self, arg[0] && jj_truthy(arg[0]));
}

static jjValue *m_get(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("get", "key", "default");
    if (!arg[0]) return jj_fail(c, "get() takes a key");
    jjValue *v = jj_dict_lookup(self, arg[0]);
    return v ? v : arg[1] ? arg[1] : jj_none();
}

static jjValue *dict_view(jjCtx *c, jjValue *self, int which) {   /* 0 keys, 1 values, 2 items */
    jjValue *l = jj_list(c, self->u.d.n, 0);
    for (size_t i = 0; l && i < self->u.d.n; i++) {
        if (which < 2) {
            l->u.l.v[i] = which ? self->u.d.v[i] : self->u.d.k[i];
            continue;
        }
        jjValue *t = jj_list(c, 2, 1);
        if (!t) return NULL;
        t->u.l.v[0] = self->u.d.k[i];
        t->u.l.v[1] = self->u.d.v[i];
        l->u.l.v[i] = t;
    }
    return l;
}

static jjValue *m_items(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "items", a)) return NULL;
    return dict_view(c, self, 2);
}

static jjValue *m_keys(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "keys", a)) return NULL;
    return dict_view(c, self, 0);
}

static jjValue *m_values(jjCtx *c, jjValue *self, jjArgs *a) {
    if (no_args(c, "values", a)) return NULL;
    return dict_view(c, self, 1);
}

static jjValue *m_index(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("index", "x");
    if (!arg[0]) return jj_fail(c, "index() takes one argument");
    for (size_t i = 0; i < self->u.l.n; i++)
        if (jj_equal(self->u.l.v[i], arg[0])) return jj_int(c, (long long)i);
    return jj_fail(c, "list.index(x): x not in list");
}

static jjValue *m_cycle(jjCtx *c, jjValue *self, jjArgs *a) {
    if (a->n_kw || !a->n_pos) return jj_fail(c, "loop.cycle() takes one or more positional arguments");
    return a->pos[self->u.loop->i % (size_t)a->n_pos];
}

/* ---- filters ---- */

static jjValue *f_tojson(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    char spaces[64];
    const char *indent = NULL, *item_sep = ", ", *key_sep = ": ";
    if (arg[1] && arg[1]->type != JV_NONE) {
        if (arg[1]->type == JV_STR) {
            jjValue *s = jj_str(c, arg[1]->u.s.p, arg[1]->u.s.len);   /* NUL-terminated copy */
            if (!s) return NULL;
            indent = s->u.s.p;
        } else {
            long long w;
            if (want_int(c, "tojson(indent)", arg[1], &w)) return NULL;
            if (w > 32) w = 32;
            if (w < 0) w = 0;
            memset(spaces, ' ', (size_t)w);
            spaces[w] = 0;
            indent = spaces;
        }
        item_sep = ",";
    }
    if (arg[2] && arg[2]->type != JV_NONE) {
        if (arg[2]->type != JV_LIST || arg[2]->u.l.n != 2 || arg[2]->u.l.v[0]->type != JV_STR ||
            arg[2]->u.l.v[1]->type != JV_STR)
            return jj_fail(c, "tojson: separators must be a pair of strings");
        jjValue *x = jj_str(c, arg[2]->u.l.v[0]->u.s.p, arg[2]->u.l.v[0]->u.s.len);
        jjValue *y = x ? jj_str(c, arg[2]->u.l.v[1]->u.s.p, arg[2]->u.l.v[1]->u.s.len) : NULL;
        if (!y) return NULL;
        item_sep = x->u.s.p;
        key_sep = y->u.s.p;
    }
    bytebuf b = {0};
    int bad = jj_write_json(c, &b, v, arg[0] && jj_truthy(arg[0]), indent, item_sep, key_sep,
                            arg[3] && jj_truthy(arg[3]), 0);
    if (bad) {
        bytebuf_free(&b);
        return NULL;
    }
    return from_buf(c, &b, 0);
}

static jjValue *f_trim(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("trim", "chars");
    jjValue *s = str_of(c, v);
    jjValue *chars = arg[0] && arg[0]->type != JV_NONE ? arg[0] : NULL;
    if (!s || (chars && !want_str(c, "trim", chars))) return NULL;
    return str_strip(c, s, chars, 1, 1);
}

static jjValue *f_length(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "length", a)) return NULL;
    switch (v->type) {
    case JV_STR: return jj_int(c, (long long)jj_utf8_len(v->u.s.p, v->u.s.len));
    case JV_LIST: return jj_int(c, (long long)v->u.l.n);
    case JV_DICT: return jj_int(c, (long long)v->u.d.n);
    case JV_UNDEF: return jj_int(c, 0);
    default: return jj_fail(c, "object of type '%s' has no len()", jj_type_name(v));
    }
}

static jjValue *f_string(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "string", a)) return NULL;
    return str_of(c, v);
}

static jjValue *f_lower(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "lower", a)) return NULL;
    jjValue *s = str_of(c, v);
    return s ? str_case(c, s, to_lower, 0) : NULL;
}

static jjValue *f_upper(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "upper", a)) return NULL;
    jjValue *s = str_of(c, v);
    return s ? str_case(c, s, to_upper, 0) : NULL;
}

static jjValue *f_title(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "title", a)) return NULL;
    jjValue *s = str_of(c, v);
    return s ? str_case(c, s, NULL, 1) : NULL;
}

static jjValue *f_capitalize(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "capitalize", a)) return NULL;
    jjValue *s = str_of(c, v);
    return s ? str_case(c, s, NULL, 2) : NULL;
}

static jjValue *f_default(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("default", "default_value", "boolean");
    int use = v->type == JV_UNDEF || (arg[1] && jj_truthy(arg[1]) && !jj_truthy(v));
    if (!use) return v;
    return arg[0] ? arg[0] : jj_str(c, "", 0);
}

/* Jinja's attribute getter for filters: "a.b" or "0", each part through
 * getitem (a key before an attribute). */
static jjValue *attr_path(jjCtx *c, jjValue *item, jjValue *attr) {
    if (attr->type == JV_INT) return jj_getitem(c, item, attr);
    if (!want_str(c, "attribute", attr)) return NULL;
    const char *p = attr->u.s.p, *end = p + attr->u.s.len;
    while (item) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        jjValue *key;
        size_t d = 0;
        while (d < n && p[d] >= '0' && p[d] <= '9') d++;
        if (n && d == n && n < 18) key = jj_int(c, strtoll(p, NULL, 10));
        else key = jj_str(c, p, n);
        if (!key) return NULL;
        if (item->type == JV_UNDEF) return item;
        item = jj_getitem(c, item, key);
        if (!dot) break;
        p = dot + 1;
    }
    return item;
}

static jjValue *f_join(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("join", "d", "attribute");
    jjValue *items = jj_iterate(c, v);
    if (!items) return NULL;
    if (arg[1]) {
        jjValue *m = jj_list(c, items->u.l.n, 0);
        for (size_t i = 0; m && i < items->u.l.n; i++)
            if (!(m->u.l.v[i] = attr_path(c, items->u.l.v[i], arg[1]))) return NULL;
        if (!(items = m)) return NULL;
    }
    jjValue *sep = arg[0] ? str_of(c, arg[0]) : NULL;
    if (arg[0] && !sep) return NULL;
    return join_items(c, items, sep ? sep->u.s.p : "", sep ? sep->u.s.len : 0, 0);
}

static jjValue *f_items(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "items", a)) return NULL;
    if (v->type == JV_UNDEF) return jj_list(c, 0, 0);
    if (v->type != JV_DICT) return jj_fail(c, "items: can only get item pairs from a mapping, not %s", jj_type_name(v));
    return dict_view(c, v, 2);
}

static jjValue *f_first(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "first", a)) return NULL;
    jjValue *l = jj_iterate(c, v);
    if (!l) return NULL;
    return l->u.l.n ? l->u.l.v[0] : jj_undef(c, "No first item, sequence was empty.");
}

static jjValue *f_last(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "last", a)) return NULL;
    jjValue *l = jj_iterate(c, v);
    if (!l) return NULL;
    return l->u.l.n ? l->u.l.v[l->u.l.n - 1] : jj_undef(c, "No last item, sequence was empty.");
}

static jjValue *f_list(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "list", a)) return NULL;
    jjValue *l = jj_iterate(c, v);
    if (!l || !l->u.l.tuple) return l;
    jjValue *r = jj_list(c, l->u.l.n, 0);
    if (r && l->u.l.n) memcpy(r->u.l.v, l->u.l.v, l->u.l.n * sizeof(jjValue *));
    return r;
}

static jjValue *f_replace(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("replace", "old", "new", "count");
    long long count = -1;
    jjValue *s = str_of(c, v);
    if (!s) return NULL;
    if (!arg[0] || !arg[1]) return jj_fail(c, "replace takes the old and the new string");
    jjValue *old = str_of(c, arg[0]), *new_ = old ? str_of(c, arg[1]) : NULL;
    if (!new_) return NULL;
    if (arg[2] && arg[2]->type != JV_NONE && want_int(c, "replace", arg[2], &count)) return NULL;
    return str_replace(c, s, old, new_, count);
}

/* select / reject / selectattr / rejectattr: positional (attr,) test, args. */
static jjValue *select_common(jjCtx *c, jjValue *v, jjArgs *a, int with_attr, int keep) {
    const char *what = with_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
    if (a->n_kw) return jj_fail(c, "%s takes positional arguments only", what);
    int first = with_attr ? 1 : 0;
    if (with_attr && a->n_pos < 1) return jj_fail(c, "%s needs the attribute's name", what);
    jjValue *items = jj_iterate(c, v);
    if (!items) return NULL;
    const jjBuiltin *test = NULL;
    if (a->n_pos > first) {
        jjValue *t = a->pos[first];
        if (!want_str(c, what, t)) return NULL;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(t->u.s.len < 63 ? t->u.s.len : 63), t->u.s.p);
        if (!(test = jj_find_test(name))) return jj_fail(c, "%s: the test '%s' is not supported", what, name);
    }
    jjArgs targs = {.pos = a->pos + first + 1, .n_pos = a->n_pos > first + 1 ? a->n_pos - first - 1 : 0};
    jjValue *out = jj_list(c, items->u.l.n, 0);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < items->u.l.n; i++) {
        jjValue *x = with_attr ? attr_path(c, items->u.l.v[i], a->pos[0]) : items->u.l.v[i];
        if (!x) return NULL;
        int ok;
        if (test) {
            jjValue *r = jj_run_test(c, test, x, &targs);
            if (!r) return NULL;
            ok = r->u.b;
        } else {
            ok = jj_truthy(x);
        }
        if (ok == keep) out->u.l.v[k++] = items->u.l.v[i];
    }
    out->u.l.n = k;
    return out;
}

static jjValue *f_select(jjCtx *c, jjValue *v, jjArgs *a) { return select_common(c, v, a, 0, 1); }
static jjValue *f_reject(jjCtx *c, jjValue *v, jjArgs *a) { return select_common(c, v, a, 0, 0); }
static jjValue *f_selectattr(jjCtx *c, jjValue *v, jjArgs *a) { return select_common(c, v, a, 1, 1); }
static jjValue *f_rejectattr(jjCtx *c, jjValue *v, jjArgs *a) { return select_common(c, v, a, 1, 0); }

static jjValue *f_map(jjCtx *c, jjValue *v, jjArgs *a) {
    jjValue *items = jj_iterate(c, v);
    if (!items) return NULL;
    jjValue *attr = NULL, *def = NULL;
    for (int k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw_names[k], "attribute")) attr = a->kw[k];
        else if (!strcmp(a->kw_names[k], "default")) def = a->kw[k];
    }
    jjValue *out = jj_list(c, items->u.l.n, 0);
    if (!out) return NULL;
    if (attr) {
        if (a->n_pos) return jj_fail(c, "map(attribute=...) takes no positional arguments");
        for (size_t i = 0; i < items->u.l.n; i++) {
            jjValue *x = attr_path(c, items->u.l.v[i], attr);
            if (!x) return NULL;
            out->u.l.v[i] = x->type == JV_UNDEF && def ? def : x;
        }
        return out;
    }
    if (!a->n_pos || !want_str(c, "map", a->pos[0])) return a->n_pos ? NULL : jj_fail(c, "map needs a filter name or attribute=");
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)(a->pos[0]->u.s.len < 63 ? a->pos[0]->u.s.len : 63), a->pos[0]->u.s.p);
    const jjBuiltin *f = jj_find_filter(name);
    if (!f) return jj_fail(c, "map: the filter '%s' is not supported", name);
    jjArgs fargs = {.pos = a->pos + 1, .n_pos = a->n_pos - 1, .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
    for (size_t i = 0; i < items->u.l.n; i++)
        if (!(out->u.l.v[i] = f->fn(c, items->u.l.v[i], &fargs))) return NULL;
    return out;
}

/* The key a sort, unique, min or max compares: the attribute, lowercased
 * unless case_sensitive. */
static jjValue *sort_key(jjCtx *c, jjValue *x, jjValue *attr, int case_sensitive) {
    if (attr && !(x = attr_path(c, x, attr))) return NULL;
    if (!case_sensitive && x->type == JV_STR) return str_case(c, x, to_lower, 0);
    return x;
}

typedef struct sortItem {
    jjValue *key, *item;
    size_t at;
} sortItem;

static int sort_cmp(const void *x, const void *y, void *failed) {
    const sortItem *a = x, *b = y;
    int ok, r = jj_compare(a->key, b->key, &ok);
    if (!ok) *(int *)failed = 1;
    return r ? r : (a->at > b->at) - (a->at < b->at);
}

static sortItem *sorted(jjCtx *c, jjValue *items, jjValue *attr, int case_sensitive) {
    sortItem *s = jj_ctx_alloc(c, (items->u.l.n + 1) * sizeof(*s));
    if (!s) return NULL;
    for (size_t i = 0; i < items->u.l.n; i++) {
        s[i].item = items->u.l.v[i];
        s[i].at = i;
        if (!(s[i].key = sort_key(c, items->u.l.v[i], attr, case_sensitive))) return NULL;
    }
    int failed = 0;
    qsort_r(s, items->u.l.n, sizeof(*s), sort_cmp, &failed);
    if (failed) {
        jj_fail(c, "sort: the items cannot be compared with each other");
        return NULL;
    }
    return s;
}

static jjValue *f_sort(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    jjValue *items = jj_iterate(c, v);
    sortItem *s = items ? sorted(c, items, arg[2], arg[1] && jj_truthy(arg[1])) : NULL;
    jjValue *out = s ? jj_list(c, items->u.l.n, 0) : NULL;
    if (!out) return NULL;
    int rev = arg[0] && jj_truthy(arg[0]);
    size_t n = items->u.l.n;
    /* Python's reverse sort keeps equal items in their order. */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (rev && j < n && jj_equal(s[j].key, s[i].key)) j++;
        for (size_t k = i; k < j; k++) out->u.l.v[rev ? n - j + (k - i) : k] = s[k].item;
        i = j;
    }
    return out;
}

static jjValue *f_unique(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("unique", "case_sensitive", "attribute");
    jjValue *items = jj_iterate(c, v);
    jjValue *out = items ? jj_list(c, items->u.l.n, 0) : NULL, *seen = out ? jj_list(c, items->u.l.n, 0) : NULL;
    if (!seen) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < items->u.l.n; i++) {
        jjValue *key = sort_key(c, items->u.l.v[i], arg[1], arg[0] && jj_truthy(arg[0]));
        if (!key) return NULL;
        size_t j = 0;
        while (j < k && !jj_equal(seen->u.l.v[j], key)) j++;
        if (j < k) continue;
        seen->u.l.v[k] = key;
        out->u.l.v[k++] = items->u.l.v[i];
    }
    out->u.l.n = k;
    return out;
}

static jjValue *minmax(jjCtx *c, jjValue *v, jjArgs *a, int want_max) {
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    jjValue *items = jj_iterate(c, v);
    if (!items) return NULL;
    if (!items->u.l.n) return jj_undef(c, "No aggregated item, sequence was empty.");
    jjValue *best = items->u.l.v[0], *bkey = sort_key(c, best, arg[1], arg[0] && jj_truthy(arg[0]));
    for (size_t i = 1; bkey && i < items->u.l.n; i++) {
        jjValue *key = sort_key(c, items->u.l.v[i], arg[1], arg[0] && jj_truthy(arg[0]));
        int ok, r = key ? jj_compare(key, bkey, &ok) : 0;
        if (!key) return NULL;
        if (!ok) return jj_fail(c, "%s: the items cannot be compared with each other", want_max ? "max" : "min");
        if (want_max ? r > 0 : r < 0) best = items->u.l.v[i], bkey = key;
    }
    return bkey ? best : NULL;
}

static jjValue *f_min(jjCtx *c, jjValue *v, jjArgs *a) { return minmax(c, v, a, 0); }
static jjValue *f_max(jjCtx *c, jjValue *v, jjArgs *a) { return minmax(c, v, a, 1); }

static jjValue *f_reverse(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "reverse", a)) return NULL;
    if (v->type == JV_STR) {
        jjValue *chars = jj_iterate(c, v);
        if (!chars) return NULL;
        bytebuf b = {0};
        int bad = 0;
        for (size_t i = chars->u.l.n; i-- > 0 && !bad;) bad = bytebuf_append(&b, chars->u.l.v[i]->u.s.p, chars->u.l.v[i]->u.s.len);
        return from_buf(c, &b, bad);
    }
    jjValue *items = jj_iterate(c, v), *out = items ? jj_list(c, items->u.l.n, 0) : NULL;
    for (size_t i = 0; out && i < items->u.l.n; i++) out->u.l.v[i] = items->u.l.v[items->u.l.n - 1 - i];
    return out;
}

static jjValue *f_sum(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("sum", "attribute", "start");
    jjValue *items = jj_iterate(c, v), *acc = arg[1] ? arg[1] : jj_int(c, 0);
    for (size_t i = 0; items && acc && i < items->u.l.n; i++) {
        jjValue *x = arg[0] ? attr_path(c, items->u.l.v[i], arg[0]) : items->u.l.v[i];
        acc = x ? jj_binop(c, "+", acc, x) : NULL;
    }
    return items ? acc : NULL;
}

static jjValue *f_abs(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "abs", a)) return NULL;
    if (v->type == JV_FLOAT) return jj_float(c, fabs(v->u.f));
    if (v->type == JV_BOOL) return jj_int(c, v->u.b);
    if (v->type == JV_INT) return v->u.i == LLONG_MIN ? jj_fail(c, "integer overflow") : jj_int(c, v->u.i < 0 ? -v->u.i : v->u.i);
    return jj_fail(c, "bad operand type for abs(): '%s'", jj_type_name(v));
}

static jjValue *f_round(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("round", "precision", "method");
    long long prec = 0;
    if (arg[0] && want_int(c, "round", arg[0], &prec)) return NULL;
    if (!jj_is_number(v)) return jj_fail(c, "round: expected a number, got %s", jj_type_name(v));
    const char *method = "common";
    if (arg[1]) {
        if (!want_str(c, "round", arg[1])) return NULL;
        method = arg[1]->u.s.len == 4 && !memcmp(arg[1]->u.s.p, "ceil", 4) ? "ceil"
                 : arg[1]->u.s.len == 5 && !memcmp(arg[1]->u.s.p, "floor", 5) ? "floor"
                 : arg[1]->u.s.len == 6 && !memcmp(arg[1]->u.s.p, "common", 6) ? "common" : NULL;
        if (!method) return jj_fail(c, "round: method must be common, ceil or floor");
    }
    if (prec > 300) prec = 300;
    if (prec < -300) prec = -300;
    double x = jj_as_double(v), m = pow(10, (double)prec);
    double r = method[0] == 'c' && method[1] == 'e' ? ceil(x * m) / m : method[0] == 'f' ? floor(x * m) / m : rint(x * m) / m;
    return jj_float(c, r);
}

static int parse_number(const jjValue *s, int want_float, double *out) {
    char buf[128];
    if (s->u.s.len >= sizeof(buf)) return -1;
    memcpy(buf, s->u.s.p, s->u.s.len);
    buf[s->u.s.len] = 0;
    char *end;
    double d = want_float ? strtod(buf, &end) : (double)strtoll(buf, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == buf || *end) return -1;
    *out = d;
    return 0;
}

static jjValue *f_int(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("int", "default", "base");
    jjValue *def = arg[0] ? arg[0] : jj_int(c, 0);
    double d;
    switch (v->type) {
    case JV_INT: return v;
    case JV_BOOL: return jj_int(c, v->u.b);
    case JV_FLOAT:
        if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18) return def;
        return jj_int(c, (long long)v->u.f);
    case JV_STR:
        if (!parse_number(v, 0, &d) || (!parse_number(v, 1, &d) && isfinite(d) && fabs(d) < 9.2e18))
            return jj_int(c, (long long)d);
        return def;
    default: return def;
    }
}

static jjValue *f_float(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("float", "default");
    double d;
    if (jj_is_number(v)) return jj_float(c, jj_as_double(v));
    if (v->type == JV_STR && !parse_number(v, 1, &d)) return jj_float(c, d);
    return arg[0] ? arg[0] : jj_float(c, 0.0);
}

static jjValue *f_indent(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("indent", "width", "first", "blank");
    bytebuf ind = {0}, b = {0};
    jjValue *s = str_of(c, v);
    if (!s) return NULL;
    int bad = 0;
    if (arg[0] && arg[0]->type == JV_STR) {
        bad = bytebuf_append(&ind, arg[0]->u.s.p, arg[0]->u.s.len);
    } else {
        long long w = 4;
        if (arg[0] && want_int(c, "indent", arg[0], &w)) return NULL;
        for (long long k = 0; k < w && k < 1024 && !bad; k++) bad = bytebuf_putc(&ind, ' ');
    }
    int first = arg[1] && jj_truthy(arg[1]), blank = arg[2] && jj_truthy(arg[2]);
    /* Jinja appends "\n" before splitlines(), so a trailing newline is kept. */
    jjValue *nl = jj_str(c, "\n", 1), *withnl = nl ? jj_binop(c, "~", s, nl) : NULL;
    jjValue *lines = withnl ? str_splitlines(c, withnl, 0) : NULL;
    if (!lines) {
        bytebuf_free(&ind);
        return NULL;
    }
    if (first && !bad) bad = bytebuf_append(&b, ind.data ? ind.data : "", ind.len);
    for (size_t i = 0; i < lines->u.l.n && !bad; i++) {
        jjValue *line = lines->u.l.v[i];
        if (i) {
            bad = bytebuf_putc(&b, '\n');
            if (!bad && (blank || line->u.s.len)) bad = bytebuf_append(&b, ind.data ? ind.data : "", ind.len);
        }
        if (!bad) bad = bytebuf_append(&b, line->u.s.p, line->u.s.len);
    }
    bytebuf_free(&ind);
    return from_buf(c, &b, bad);
}

static jjValue *f_safe(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "safe", a)) return NULL;
    return v;
}

static jjValue *f_escape(jjCtx *c, jjValue *v, jjArgs *a) {
    if (no_args(c, "escape", a)) return NULL;
    jjValue *s = str_of(c, v);
    if (!s) return NULL;
    bytebuf b = {0};
    int bad = 0;
    for (size_t i = 0; i < s->u.s.len && !bad; i++) {
        char ch = s->u.s.p[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        bad = e ? bytebuf_append(&b, e, strlen(e)) : bytebuf_putc(&b, ch);
    }
    return from_buf(c, &b, bad);
}

static jjValue *f_attr(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("attr", "name");
    if (!arg[0] || !want_str(c, "attr", arg[0])) return arg[0] ? NULL : jj_fail(c, "attr needs a name");
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)(arg[0]->u.s.len < 127 ? arg[0]->u.s.len : 127), arg[0]->u.s.p);
    /* Jinja's attr filter is getattr alone: a dict's keys are not attributes. */
    if (v->type == JV_DICT && !jj_dict_attr_is_method(name))
        return jj_undeff(c, "'dict object' has no attribute '%s'", name);
    return jj_getattr(c, v, name);
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
    if (!strcmp(op, "==")) return jj_bool(jj_equal(v, o));
    if (!strcmp(op, "!=")) return jj_bool(!jj_equal(v, o));
    int ok, r = jj_compare(v, o, &ok);
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
    jjValue *s = str_of(c, v);
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
        if (want_int(c, "range", a->pos[i], &x[a->n_pos == 1 ? 1 : i])) return NULL;
    if (x[2] == 0) return jj_fail(c, "range() arg 3 must not be zero");
    long long n = x[2] > 0 ? (x[1] > x[0] ? (x[1] - x[0] - 1) / x[2] + 1 : 0) : (x[0] > x[1] ? (x[0] - x[1] - 1) / -x[2] + 1 : 0);
    if (n > JJ_MAX_RANGE) return jj_fail(c, "range of %lld items is too big (at most %d in a template)", n, JJ_MAX_RANGE);
    jjValue *l = jj_list(c, (size_t)n, 0);
    for (long long i = 0; l && i < n; i++)
        if (!(l->u.l.v[i] = jj_int(c, x[0] + i * x[2]))) return NULL;
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
    jjValue *msg = a->n_pos ? str_of(c, a->pos[0]) : NULL;
    if (a->n_pos && !msg) return NULL;
    return jj_fail(c, "the template raised an error: %.*s", msg ? (int)(msg->u.s.len > 1500 ? 1500 : msg->u.s.len) : 0,
                   msg ? msg->u.s.p : "");
}

static jjValue *g_strftime_now(jjCtx *c, jjValue *self, jjArgs *a) {
    (void)self;
    if (a->n_pos != 1 || a->n_kw || !want_str(c, "strftime_now", a->pos[0]))
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

static const jjBuiltin FILTERS[] = {
    {"tojson", f_tojson}, {"trim", f_trim}, {"length", f_length}, {"count", f_length},
    {"string", f_string}, {"lower", f_lower}, {"upper", f_upper}, {"title", f_title},
    {"capitalize", f_capitalize}, {"default", f_default}, {"d", f_default}, {"join", f_join},
    {"items", f_items}, {"first", f_first}, {"last", f_last}, {"list", f_list},
    {"replace", f_replace}, {"select", f_select}, {"reject", f_reject}, {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr}, {"map", f_map}, {"sort", f_sort}, {"unique", f_unique},
    {"min", f_min}, {"max", f_max}, {"reverse", f_reverse}, {"sum", f_sum}, {"abs", f_abs},
    {"round", f_round}, {"int", f_int}, {"float", f_float}, {"indent", f_indent}, {"safe", f_safe},
    {"escape", f_escape}, {"e", f_escape}, {"attr", f_attr}, {NULL, NULL}};

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

static const jjBuiltin STR_METHODS[] = {
    {"startswith", m_startswith}, {"endswith", m_endswith}, {"split", m_split}, {"rsplit", m_rsplit},
    {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"replace", m_replace},
    {"lower", m_lower}, {"upper", m_upper}, {"title", m_title}, {"capitalize", m_capitalize},
    {"find", m_find}, {"count", m_count}, {"join", m_join}, {"splitlines", m_splitlines}, {NULL, NULL}};

static const jjBuiltin DICT_METHODS[] = {
    {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {NULL, NULL}};

static const jjBuiltin LIST_METHODS[] = {{"index", m_index}, {"count", m_count}, {NULL, NULL}};

static const jjBuiltin LOOP_METHODS[] = {{"cycle", m_cycle}, {NULL, NULL}};

static const jjBuiltin *find(const jjBuiltin *table, const char *name) {
    for (; table->name; table++)
        if (!strcmp(table->name, name)) return table;
    return NULL;
}

const jjBuiltin *jj_find_filter(const char *name) { return find(FILTERS, name); }
const jjBuiltin *jj_find_test(const char *name) { return find(TESTS, name); }
const jjBuiltin *jj_find_global(const char *name) { return find(GLOBALS, name); }

const jjBuiltin *jj_find_method(const jjValue *v, const char *name) {
    switch (v->type) {
    case JV_STR: return find(STR_METHODS, name);
    case JV_DICT: return find(DICT_METHODS, name);
    case JV_LIST: return find(LIST_METHODS, name);
    case JV_LOOP: return find(LOOP_METHODS, name);
    default: return NULL;
    }
}

int jj_method_exists(const char *name) {
    return find(STR_METHODS, name) || find(DICT_METHODS, name) || find(LIST_METHODS, name) ||
           find(LOOP_METHODS, name);
}

int jj_dict_attr_is_method(const char *name) {
    static const char *const attrs[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop",
                                        "popitem", "setdefault", "update", "values", NULL};
    for (const char *const *a = attrs; *a; a++)
        if (!strcmp(*a, name)) return 1;
    return 0;
}
