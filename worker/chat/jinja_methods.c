/* jinja_methods.c: the methods of str, dict, list and loop values
 * (`s.split()`, `d.items()`, `loop.cycle()`), with Python 3's meanings, and
 * the string operations by code point they share with the filters
 * (Unicode's full case mappings, Python's whitespace). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "worker/chat/jinja_impl.h"

/* ---- string helpers (by code point) ---- */

int32_t jj_lower_cp(int32_t cp) { return utf8proc_tolower(cp); }
int32_t jj_upper_cp(int32_t cp) { return utf8proc_toupper(cp); }
int32_t jj_title_cp(int32_t cp) { return utf8proc_totitle(cp); }

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

static int put_case(bytebuf *b, int32_t cp, jjCaseFn f) {
    if (f == jj_upper_cp)
        for (int i = 0; FULL_UPPER[i].upper; i++)
            if (FULL_UPPER[i].cp == cp) return bytebuf_append(b, FULL_UPPER[i].upper, strlen(FULL_UPPER[i].upper));
    if (f == jj_lower_cp && cp == 0x130) return bytebuf_append(b, "i\u0307", 3);
    return put_cp(b, f(cp));
}

static int is_cased(int32_t cp) {
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

jjValue *jj_str_case(jjCtx *c, jjValue *s, jjCaseFn f, int mode) {
    bytebuf b = {0};
    int bad = 0, prev_cased = 0;
    for (size_t i = 0, k = 0; i < s->u.s.len && !bad; k++) {
        int32_t cp;
        i += jj_utf8_decode(s->u.s.p + i, s->u.s.len - i, &cp);
        jjCaseFn g = mode == 0 ? f : mode == 1 ? (prev_cased ? jj_lower_cp : jj_title_cp) : (k == 0 ? jj_title_cp : jj_lower_cp);
        prev_cased = is_cased(cp);
        bad = put_case(&b, cp, g);
    }
    return jj_from_buf(c, &b, bad);
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

jjValue *jj_str_strip(jjCtx *c, jjValue *s, const jjValue *chars, int left, int right) {
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

jjValue *jj_str_replace(jjCtx *c, jjValue *s, jjValue *old, jjValue *new_, long long count) {
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
            bad = bad || bytebuf_append(&b, s->u.s.p + i, k) || jj_room(c, b.len);
            i += k;
        }
        return jj_from_buf(c, &b, bad);
    }
    size_t i = 0;
    while (!bad) {
        const char *hit = (count < 0 || done < count) ? memmem(s->u.s.p + i, s->u.s.len - i, old->u.s.p, old->u.s.len) : NULL;
        if (!hit) {
            bad = bytebuf_append(&b, s->u.s.p + i, s->u.s.len - i);
            break;
        }
        size_t at = (size_t)(hit - s->u.s.p);
        bad = bytebuf_append(&b, s->u.s.p + i, at - i) || bytebuf_append(&b, new_->u.s.p, new_->u.s.len) ||
              jj_room(c, b.len);
        i = at + old->u.s.len;
        done++;
    }
    return jj_from_buf(c, &b, bad);
}

/* str.splitlines(): the line boundaries Python knows. */
jjValue *jj_str_splitlines(jjCtx *c, jjValue *s, int keepends) {
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
        if (!jj_want_str(c, "startswith", x)) return NULL;
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
        if (!jj_want_str(c, "endswith", x)) return NULL;
        if (x->u.s.len <= self->u.s.len && !memcmp(self->u.s.p + self->u.s.len - x->u.s.len, x->u.s.p, x->u.s.len))
            ends = 1;
    }
    return jj_bool(ends);
}

static jjValue *split_common(jjCtx *c, jjValue *self, jjArgs *a, int right) {
    BIND(right ? "rsplit" : "split", "sep", "maxsplit");
    long long maxsplit = -1;
    jjValue *sep = arg[0] && arg[0]->type != JV_NONE ? arg[0] : NULL;
    if (sep && !jj_want_str(c, "split", sep)) return NULL;
    if (arg[1] && jj_want_int(c, "split", arg[1], &maxsplit)) return NULL;
    return str_split(c, self, sep, maxsplit, right);
}

static jjValue *m_split(jjCtx *c, jjValue *self, jjArgs *a) { return split_common(c, self, a, 0); }
static jjValue *m_rsplit(jjCtx *c, jjValue *self, jjArgs *a) { return split_common(c, self, a, 1); }

static jjValue *strip_common(jjCtx *c, jjValue *self, jjArgs *a, int left, int right) {
    BIND("strip", "chars");
    jjValue *chars = arg[0] && arg[0]->type != JV_NONE ? arg[0] : NULL;
    if (chars && !jj_want_str(c, "strip", chars)) return NULL;
    return jj_str_strip(c, self, chars, left, right);
}

static jjValue *m_strip(jjCtx *c, jjValue *self, jjArgs *a) { return strip_common(c, self, a, 1, 1); }
static jjValue *m_lstrip(jjCtx *c, jjValue *self, jjArgs *a) { return strip_common(c, self, a, 1, 0); }
static jjValue *m_rstrip(jjCtx *c, jjValue *self, jjArgs *a) { return strip_common(c, self, a, 0, 1); }

static jjValue *m_replace(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("replace", "old", "new", "count");
    long long count = -1;
    if (!arg[0] || !arg[1]) return jj_fail(c, "replace() takes the old and the new string");
    if (!jj_want_str(c, "replace", arg[0]) || !jj_want_str(c, "replace", arg[1])) return NULL;
    if (arg[2] && jj_want_int(c, "replace", arg[2], &count)) return NULL;
    return jj_str_replace(c, self, arg[0], arg[1], count);
}

static jjValue *m_lower(jjCtx *c, jjValue *self, jjArgs *a) {
    if (jj_no_args(c, "lower", a)) return NULL;
    return jj_str_case(c, self, jj_lower_cp, 0);
}

static jjValue *m_upper(jjCtx *c, jjValue *self, jjArgs *a) {
    if (jj_no_args(c, "upper", a)) return NULL;
    return jj_str_case(c, self, jj_upper_cp, 0);
}

static jjValue *m_title(jjCtx *c, jjValue *self, jjArgs *a) {
    if (jj_no_args(c, "title", a)) return NULL;
    return jj_str_case(c, self, NULL, 1);
}

static jjValue *m_capitalize(jjCtx *c, jjValue *self, jjArgs *a) {
    if (jj_no_args(c, "capitalize", a)) return NULL;
    return jj_str_case(c, self, NULL, 2);
}

static jjValue *m_find(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("find", "sub");
    if (!arg[0] || !jj_want_str(c, "find", arg[0])) return arg[0] ? NULL : jj_fail(c, "jj_find_builtin() takes one argument");
    const char *hit = memmem(self->u.s.p, self->u.s.len, arg[0]->u.s.p, arg[0]->u.s.len);
    if (!arg[0]->u.s.len) hit = self->u.s.p;
    return jj_int(c, hit ? (long long)jj_utf8_len(self->u.s.p, (size_t)(hit - self->u.s.p)) : -1);
}

static jjValue *m_count(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("count", "x");
    if (!arg[0]) return jj_fail(c, "count() takes one argument");
    long long k = 0;
    if (self->type == JV_LIST) {
        for (size_t i = 0; i < self->u.l.n; i++) k += jj_equal(c, self->u.l.v[i], arg[0]);
        return jj_failed(c) ? NULL : jj_int(c, k);
    }
    if (!jj_want_str(c, "count", arg[0])) return NULL;
    if (!arg[0]->u.s.len) return jj_int(c, (long long)jj_utf8_len(self->u.s.p, self->u.s.len) + 1);
    for (size_t i = 0;;) {
        const char *hit = memmem(self->u.s.p + i, self->u.s.len - i, arg[0]->u.s.p, arg[0]->u.s.len);
        if (!hit) break;
        k++;
        i = (size_t)(hit - self->u.s.p) + arg[0]->u.s.len;
    }
    return jj_int(c, k);
}

jjValue *jj_join_items(jjCtx *c, jjValue *items, const char *sep, size_t sep_len, int strict) {
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
    return jj_from_buf(c, &b, bad);
}

static jjValue *m_join(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("join", "iterable");
    jjValue *items = arg[0] ? jj_iterate(c, arg[0]) : jj_fail(c, "join() takes one argument");
    return items ? jj_join_items(c, items, self->u.s.p, self->u.s.len, 1) : NULL;
}

static jjValue *m_splitlines(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("splitlines", "keepends");
    return jj_str_splitlines(c, self, arg[0] && jj_truthy(arg[0]));
}

static jjValue *m_get(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("get", "key", "default");
    if (!arg[0]) return jj_fail(c, "get() takes a key");
    jjValue *v = jj_dict_lookup(c, self, arg[0]);
    if (jj_failed(c)) return NULL;
    return v ? v : arg[1] ? arg[1] : jj_none();
}

jjValue *jj_dict_view(jjCtx *c, jjValue *self, int which) {   /* 0 keys, 1 values, 2 items */
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
    if (jj_no_args(c, "items", a)) return NULL;
    return jj_dict_view(c, self, 2);
}

static jjValue *m_keys(jjCtx *c, jjValue *self, jjArgs *a) {
    if (jj_no_args(c, "keys", a)) return NULL;
    return jj_dict_view(c, self, 0);
}

static jjValue *m_values(jjCtx *c, jjValue *self, jjArgs *a) {
    if (jj_no_args(c, "values", a)) return NULL;
    return jj_dict_view(c, self, 1);
}

static jjValue *m_index(jjCtx *c, jjValue *self, jjArgs *a) {
    BIND("index", "x");
    if (!arg[0]) return jj_fail(c, "index() takes one argument");
    for (size_t i = 0; i < self->u.l.n; i++)
        if (jj_equal(c, self->u.l.v[i], arg[0])) return jj_int(c, (long long)i);
    if (jj_failed(c)) return NULL;
    return jj_fail(c, "list.index(x): x not in list");
}

static jjValue *m_cycle(jjCtx *c, jjValue *self, jjArgs *a) {
    if (a->n_kw || !a->n_pos) return jj_fail(c, "loop.cycle() takes one or more positional arguments");
    return a->pos[self->u.loop->i % (size_t)a->n_pos];
}

/* ---- tables ---- */

static const jjBuiltin STR_METHODS[] = {
    {"startswith", m_startswith}, {"endswith", m_endswith}, {"split", m_split}, {"rsplit", m_rsplit},
    {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"replace", m_replace},
    {"lower", m_lower}, {"upper", m_upper}, {"title", m_title}, {"capitalize", m_capitalize},
    {"find", m_find}, {"count", m_count}, {"join", m_join}, {"splitlines", m_splitlines}, {NULL, NULL}};

static const jjBuiltin DICT_METHODS[] = {
    {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {NULL, NULL}};

static const jjBuiltin LIST_METHODS[] = {{"index", m_index}, {"count", m_count}, {NULL, NULL}};

static const jjBuiltin LOOP_METHODS[] = {{"cycle", m_cycle}, {NULL, NULL}};

const jjBuiltin *jj_find_method(const jjValue *v, const char *name) {
    switch (v->type) {
    case JV_STR: return jj_find_builtin(STR_METHODS, name);
    case JV_DICT: return jj_find_builtin(DICT_METHODS, name);
    case JV_LIST: return jj_find_builtin(LIST_METHODS, name);
    case JV_LOOP: return jj_find_builtin(LOOP_METHODS, name);
    default: return NULL;
    }
}

int jj_method_exists(const char *name) {
    return jj_find_builtin(STR_METHODS, name) || jj_find_builtin(DICT_METHODS, name) || jj_find_builtin(LIST_METHODS, name) ||
           jj_find_builtin(LOOP_METHODS, name);
}

int jj_dict_attr_is_method(const char *name) {
    static const char *const attrs[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop",
                                        "popitem", "setdefault", "update", "values", NULL};
    for (const char *const *a = attrs; *a; a++)
        if (!strcmp(*a, name)) return 1;
    return 0;
}