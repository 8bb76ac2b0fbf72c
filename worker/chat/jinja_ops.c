/* jinja_ops.c: Python's operators and attribute rules as templates see
 * them: arithmetic and comparison with Python's types, `in`, iteration,
 * subscripts and slices, and jinja2's sandboxed getattr (a dict's methods
 * before its keys, a missing attribute undefined rather than an error). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja_impl.h"

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
        jjValue *x = jj_to_str(c, a), *y = x ? jj_to_str(c, b) : NULL;
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
        jjValue *v = jj_dict_lookup(c, obj, key);
        if (v || jj_failed(c)) return v;
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
            if (jj_equal(c, container->u.l.v[i], item)) return 1;
        return jj_failed(c) ? -1 : 0;
    case JV_DICT: case JV_NS: return jj_dict_lookup(c, container, item) != NULL ? 1 : jj_failed(c) ? -1 : 0;
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

