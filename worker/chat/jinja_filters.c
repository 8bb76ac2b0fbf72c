/* jinja_filters.c: the filters a template may use (`| tojson`, `| trim`,
 * `| map(attribute=...)`, ...), each as Jinja 3 defines it. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja_impl.h"

/* ---- filters ---- */

static jjValue *f_tojson(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    const char *indent = NULL, *item_sep = ", ", *key_sep = ": ";
    if (arg[1] && arg[1]->type != JV_NONE) {
        if (arg[1]->type == JV_STR) {
            jjValue *s = jj_str(c, arg[1]->u.s.p, arg[1]->u.s.len);   /* NUL-terminated copy */
            if (!s) return NULL;
            indent = s->u.s.p;
        } else {
            long long w;
            if (jj_want_int(c, "tojson(indent)", arg[1], &w)) return NULL;
            if (w < 0) w = 0;   /* json.dumps: newlines, no spaces */
            char *spaces = jj_room(c, (size_t)w) ? NULL : jj_ctx_alloc(c, (size_t)w + 1);
            if (!spaces) return NULL;
            memset(spaces, ' ', (size_t)w);
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
    return jj_from_buf(c, &b, 0);
}

static jjValue *f_trim(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("trim", "chars");
    jjValue *s = jj_to_str(c, v);
    jjValue *chars = arg[0] && arg[0]->type != JV_NONE ? arg[0] : NULL;
    if (!s || (chars && !jj_want_str(c, "trim", chars))) return NULL;
    return jj_str_strip(c, s, chars, 1, 1);
}

static jjValue *f_length(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "length", a)) return NULL;
    switch (v->type) {
    case JV_STR: return jj_int(c, (long long)jj_utf8_len(v->u.s.p, v->u.s.len));
    case JV_LIST: return jj_int(c, (long long)v->u.l.n);
    case JV_DICT: return jj_int(c, (long long)v->u.d.n);
    case JV_UNDEF: return jj_int(c, 0);
    default: return jj_fail(c, "object of type '%s' has no len()", jj_type_name(v));
    }
}

static jjValue *f_string(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "string", a)) return NULL;
    return jj_to_str(c, v);
}

static jjValue *f_lower(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "lower", a)) return NULL;
    jjValue *s = jj_to_str(c, v);
    return s ? jj_str_case(c, s, jj_lower_cp, 0) : NULL;
}

static jjValue *f_upper(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "upper", a)) return NULL;
    jjValue *s = jj_to_str(c, v);
    return s ? jj_str_case(c, s, jj_upper_cp, 0) : NULL;
}

static jjValue *f_title(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "title", a)) return NULL;
    jjValue *s = jj_to_str(c, v);
    return s ? jj_str_case(c, s, NULL, 1) : NULL;
}

static jjValue *f_capitalize(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "capitalize", a)) return NULL;
    jjValue *s = jj_to_str(c, v);
    return s ? jj_str_case(c, s, NULL, 2) : NULL;
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
    if (!jj_want_str(c, "attribute", attr)) return NULL;
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
    jjValue *sep = arg[0] ? jj_to_str(c, arg[0]) : NULL;
    if (arg[0] && !sep) return NULL;
    return jj_join_items(c, items, sep ? sep->u.s.p : "", sep ? sep->u.s.len : 0, 0);
}

static jjValue *f_items(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "items", a)) return NULL;
    if (v->type == JV_UNDEF) return jj_list(c, 0, 0);
    if (v->type != JV_DICT) return jj_fail(c, "items: can only get item pairs from a mapping, not %s", jj_type_name(v));
    return jj_dict_view(c, v, 2);
}

static jjValue *f_first(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "first", a)) return NULL;
    jjValue *l = jj_iterate(c, v);
    if (!l) return NULL;
    return l->u.l.n ? l->u.l.v[0] : jj_undef(c, "No first item, sequence was empty.");
}

static jjValue *f_last(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "last", a)) return NULL;
    jjValue *l = jj_iterate(c, v);
    if (!l) return NULL;
    return l->u.l.n ? l->u.l.v[l->u.l.n - 1] : jj_undef(c, "No last item, sequence was empty.");
}

static jjValue *f_list(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "list", a)) return NULL;
    jjValue *l = jj_iterate(c, v);
    if (!l || !l->u.l.tuple) return l;
    jjValue *r = jj_list(c, l->u.l.n, 0);
    if (r && l->u.l.n) memcpy(r->u.l.v, l->u.l.v, l->u.l.n * sizeof(jjValue *));
    return r;
}

static jjValue *f_replace(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("replace", "old", "new", "count");
    long long count = -1;
    jjValue *s = jj_to_str(c, v);
    if (!s) return NULL;
    if (!arg[0] || !arg[1]) return jj_fail(c, "replace takes the old and the new string");
    jjValue *old = jj_to_str(c, arg[0]), *new_ = old ? jj_to_str(c, arg[1]) : NULL;
    if (!new_) return NULL;
    if (arg[2] && arg[2]->type != JV_NONE && jj_want_int(c, "replace", arg[2], &count)) return NULL;
    return jj_str_replace(c, s, old, new_, count);
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
        if (!jj_want_str(c, what, t)) return NULL;
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
    if (!a->n_pos || !jj_want_str(c, "map", a->pos[0])) return a->n_pos ? NULL : jj_fail(c, "map needs a filter name or attribute=");
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
    if (!case_sensitive && x->type == JV_STR) return jj_str_case(c, x, jj_lower_cp, 0);
    return x;
}

typedef struct sortItem {
    jjValue *key, *item;
    size_t at;
} sortItem;

static int sort_cmp(const void *x, const void *y, void *ctx) {
    const sortItem *a = x, *b = y;
    jjCtx *c = ctx;
    int ok, r = jj_compare(c, a->key, b->key, &ok);
    if (!ok && !jj_failed(c)) jj_fail(c, "sort: the items cannot be compared with each other");
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
    qsort_r(s, items->u.l.n, sizeof(*s), sort_cmp, c);
    return jj_failed(c) ? NULL : s;
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
        while (rev && j < n && jj_equal(c, s[j].key, s[i].key)) j++;
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
        while (j < k && !jj_equal(c, seen->u.l.v[j], key)) j++;
        if (jj_failed(c)) return NULL;
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
        int ok, r = key ? jj_compare(c, key, bkey, &ok) : 0;
        if (!key || jj_failed(c)) return NULL;
        if (!ok) return jj_fail(c, "%s: the items cannot be compared with each other", want_max ? "max" : "min");
        if (want_max ? r > 0 : r < 0) best = items->u.l.v[i], bkey = key;
    }
    return bkey ? best : NULL;
}

static jjValue *f_min(jjCtx *c, jjValue *v, jjArgs *a) { return minmax(c, v, a, 0); }
static jjValue *f_max(jjCtx *c, jjValue *v, jjArgs *a) { return minmax(c, v, a, 1); }

static jjValue *f_reverse(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "reverse", a)) return NULL;
    if (v->type == JV_STR) {
        jjValue *chars = jj_iterate(c, v);
        if (!chars) return NULL;
        bytebuf b = {0};
        int bad = 0;
        for (size_t i = chars->u.l.n; i-- > 0 && !bad;) bad = bytebuf_append(&b, chars->u.l.v[i]->u.s.p, chars->u.l.v[i]->u.s.len);
        return jj_from_buf(c, &b, bad);
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
    if (jj_no_args(c, "abs", a)) return NULL;
    if (v->type == JV_FLOAT) return jj_float(c, fabs(v->u.f));
    if (v->type == JV_BOOL) return jj_int(c, v->u.b);
    if (v->type == JV_INT) return v->u.i == LLONG_MIN ? jj_fail(c, "integer overflow") : jj_int(c, v->u.i < 0 ? -v->u.i : v->u.i);
    return jj_fail(c, "bad operand type for abs(): '%s'", jj_type_name(v));
}

static jjValue *f_round(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("round", "precision", "method");
    long long prec = 0;
    if (arg[0] && jj_want_int(c, "round", arg[0], &prec)) return NULL;
    if (!jj_is_number(v)) return jj_fail(c, "round: expected a number, got %s", jj_type_name(v));
    const char *method = "common";
    if (arg[1]) {
        if (!jj_want_str(c, "round", arg[1])) return NULL;
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
    if (v->type == JV_UNDEF) return jj_fail_undef(c, v);   /* int(Undefined) raises, not the default */
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
    if (v->type == JV_UNDEF) return jj_fail_undef(c, v);
    if (jj_is_number(v)) return jj_float(c, jj_as_double(v));
    if (v->type == JV_STR && !parse_number(v, 1, &d)) return jj_float(c, d);
    return arg[0] ? arg[0] : jj_float(c, 0.0);
}

static jjValue *f_indent(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("indent", "width", "first", "blank");
    if (v->type == JV_UNDEF) return jj_fail_undef(c, v);   /* Jinja appends "\n" to it */
    bytebuf ind = {0}, b = {0};
    jjValue *s = jj_to_str(c, v);
    if (!s) return NULL;
    int bad = 0;
    if (arg[0] && arg[0]->type == JV_STR) {
        bad = bytebuf_append(&ind, arg[0]->u.s.p, arg[0]->u.s.len);
    } else {
        long long w = 4;
        if (arg[0] && jj_want_int(c, "indent", arg[0], &w)) return NULL;
        bad = w > 0 && jj_room(c, (size_t)w);
        for (long long k = 0; k < w && !bad; k++) bad = bytebuf_putc(&ind, ' ');
    }
    int first = arg[1] && jj_truthy(arg[1]), blank = arg[2] && jj_truthy(arg[2]);
    /* Jinja appends "\n" before splitlines(), so a trailing newline is kept. */
    jjValue *nl = jj_str(c, "\n", 1), *withnl = nl ? jj_binop(c, "~", s, nl) : NULL;
    jjValue *lines = withnl ? jj_str_splitlines(c, withnl, 0) : NULL;
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
        if (!bad) bad = bytebuf_append(&b, line->u.s.p, line->u.s.len) || jj_room(c, b.len);
    }
    bytebuf_free(&ind);
    return jj_from_buf(c, &b, bad);
}

static jjValue *f_safe(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "safe", a)) return NULL;
    return v;
}

static jjValue *f_escape(jjCtx *c, jjValue *v, jjArgs *a) {
    if (jj_no_args(c, "escape", a)) return NULL;
    jjValue *s = jj_to_str(c, v);
    if (!s) return NULL;
    bytebuf b = {0};
    int bad = 0;
    for (size_t i = 0; i < s->u.s.len && !bad; i++) {
        char ch = s->u.s.p[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        bad = e ? bytebuf_append(&b, e, strlen(e)) : bytebuf_putc(&b, ch);
    }
    return jj_from_buf(c, &b, bad);
}

static jjValue *f_attr(jjCtx *c, jjValue *v, jjArgs *a) {
    BIND("attr", "name");
    if (!arg[0] || !jj_want_str(c, "attr", arg[0])) return arg[0] ? NULL : jj_fail(c, "attr needs a name");
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)(arg[0]->u.s.len < 127 ? arg[0]->u.s.len : 127), arg[0]->u.s.p);
    /* Jinja's attr filter is getattr alone: a dict's keys are not attributes. */
    if (v->type == JV_DICT && !jj_dict_attr_is_method(name))
        return jj_undeff(c, "'dict object' has no attribute '%s'", name);
    return jj_getattr(c, v, name);
}

/* ---- table ---- */

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

const jjBuiltin *jj_find_filter(const char *name) { return jj_find_builtin(FILTERS, name); }
