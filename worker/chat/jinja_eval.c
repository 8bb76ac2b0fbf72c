/* jinja_eval.c: rendering a parsed template, with Jinja's scoping (a for
 * loop's body and a macro each get their own variables; `if` does not),
 * Python's operators, and the sandbox's bounds on steps, memory, output
 * and macro depth. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja_impl.h"

void jinja_limits_default(jjLimits *lim) {
    lim->max_steps = 10 * 1000 * 1000;
    lim->max_memory = (size_t)256 << 20;
    lim->max_output = (size_t)32 << 20;
    lim->max_depth = 64;
}

enum { EXEC_OK = 0, EXEC_BREAK = 1, EXEC_CONTINUE = 2 };

static jjValue *eval(jjCtx *c, const jjNode *n);
static int exec_body(jjCtx *c, jjNode *const *body, int n);

static int step(jjCtx *c, const jjNode *n) {
    if (jj_failed(c)) return -1;
    c->line = n->line;
    if (++c->steps > c->lim->max_steps) {
        jj_fail(c, "the template ran more than %lld steps; it is stopped so it cannot hold up the worker",
                c->lim->max_steps);
        return -1;
    }
    return 0;
}

static int emit(jjCtx *c, const char *p, size_t n) {
    if (n > c->lim->max_output || c->out_total > c->lim->max_output - n) {
        jj_fail(c, "the template's output is over %zu MiB", c->lim->max_output >> 20);
        return -1;
    }
    c->out_total += n;
    if (bytebuf_append(c->out, p, n)) {
        jj_fail(c, "out of memory");
        return -1;
    }
    return 0;
}

/* ---- variables ---- */

static jjFrame *frame_push(jjCtx *c, jjFrame *parent) {
    jjFrame *f = jj_ctx_alloc(c, sizeof(*f));
    if (f) f->parent = parent;
    return f;
}

/* name must outlive the frame (the template's strings do). */
static int set_var(jjCtx *c, const char *name, jjValue *v) {
    jjFrame *f = c->frame;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 4;
        const char **names = jj_ctx_alloc(c, cap * sizeof(*names));
        jjValue **vals = names ? jj_ctx_alloc(c, cap * sizeof(*vals)) : NULL;
        if (!vals) return -1;
        if (f->n) {
            memcpy(names, f->names, f->n * sizeof(*names));
            memcpy(vals, f->vals, f->n * sizeof(*vals));
        }
        f->names = names, f->vals = vals, f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
    return 0;
}

static jjValue *lookup(jjCtx *c, const char *name) {
    for (jjFrame *f = c->frame; f; f = f->parent)
        for (size_t i = 0; i < f->n; i++)
            if (!strcmp(f->names[i], name)) return f->vals[i];
    const jjBuiltin *g = jj_find_global(name);
    if (g) {
        jjValue *fn = jj_ctx_alloc(c, sizeof(*fn));
        if (!fn) return NULL;
        fn->type = JV_FUNC;
        fn->u.fn.fn = g;
        return fn;
    }
    return jj_undeff(c, "'%s' is undefined", name);
}

/* Bind a loop or set target (a name or a tuple of names) to v. */
static int assign(jjCtx *c, const jjNode *target, jjValue *v) {
    if (target->kind == N_NAME) return set_var(c, target->name, v);
    jjValue *items = jj_iterate(c, v);
    if (!items) return -1;
    if (items->u.l.n != (size_t)target->n) {
        jj_fail(c, "%s values to unpack (expected %d, got %zu)",
                items->u.l.n < (size_t)target->n ? "not enough" : "too many", target->n, items->u.l.n);
        return -1;
    }
    for (int i = 0; i < target->n; i++)
        if (set_var(c, target->list[i]->name, items->u.l.v[i])) return -1;
    return 0;
}

/* ---- expressions ---- */

static int eval_args(jjCtx *c, const jjNode *n, jjArgs *a) {
    memset(a, 0, sizeof(*a));
    a->n_pos = n->n;
    a->n_kw = n->n2;
    a->kw_names = n->names;
    if (n->n && !(a->pos = jj_ctx_alloc(c, (size_t)n->n * sizeof(jjValue *)))) return -1;
    if (n->n2 && !(a->kw = jj_ctx_alloc(c, (size_t)n->n2 * sizeof(jjValue *)))) return -1;
    for (int i = 0; i < n->n; i++)
        if (!(a->pos[i] = eval(c, n->list[i]))) return -1;
    for (int i = 0; i < n->n2; i++)
        if (!(a->kw[i] = eval(c, n->list2[i]))) return -1;
    return 0;
}

static long long clamp_index(long long i, long long n, int step_neg) {
    if (i < 0) {
        i += n;
        if (i < 0) i = step_neg ? -1 : 0;
    } else if (i >= n) {
        i = step_neg ? n - 1 : n;
    }
    return i;
}

/* obj[start:stop:step] on a list or a string (by code point). */
static jjValue *eval_slice(jjCtx *c, const jjNode *n) {
    jjValue *obj = eval(c, n->a), *part[3] = {NULL, NULL, NULL};
    if (!obj) return NULL;
    for (int i = 0; i < 3; i++) {
        if (!n->list[i]) continue;
        if (!(part[i] = eval(c, n->list[i]))) return NULL;
        if (part[i]->type == JV_NONE) part[i] = NULL;
        else if (part[i]->type != JV_INT && part[i]->type != JV_BOOL)
            return jj_fail(c, "slice indices must be integers or None, not %s", jj_type_name(part[i]));
    }
    if (obj->type == JV_UNDEF) return jj_fail_undef(c, obj);
    if (obj->type != JV_LIST && obj->type != JV_STR)
        return jj_fail(c, "'%s' object is not subscriptable", jj_type_name(obj));
    long long st = part[2] ? (part[2]->type == JV_INT ? part[2]->u.i : part[2]->u.b) : 1;
    if (st == 0) return jj_fail(c, "slice step cannot be zero");
    int is_str = obj->type == JV_STR;
    long long len = is_str ? (long long)jj_utf8_len(obj->u.s.p, obj->u.s.len) : (long long)obj->u.l.n;
    /* A step longer than the sequence picks the first item only, as the
     * longest one does, so the arithmetic below cannot overflow. */
    if (st > len + 1) st = len + 1;
    if (st < -(len + 1)) st = -(len + 1);
    long long lo, hi;
    lo = part[0] ? clamp_index(part[0]->type == JV_INT ? part[0]->u.i : part[0]->u.b, len, st < 0) : st < 0 ? len - 1 : 0;
    hi = part[1] ? clamp_index(part[1]->type == JV_INT ? part[1]->u.i : part[1]->u.b, len, st < 0) : st < 0 ? -1 : len;
    long long count = st > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
    if (is_str) {
        /* Byte offsets of every code point, then the picked ones. */
        size_t *off = malloc(((size_t)len + 1) * sizeof(size_t));
        bytebuf b = {0};
        if (!off) return jj_fail(c, "out of memory");
        size_t k = 0;
        for (size_t i = 0; i < obj->u.s.len; i++)
            if (((unsigned char)obj->u.s.p[i] & 0xC0) != 0x80) off[k++] = i;
        off[k] = obj->u.s.len;
        int bad = 0;
        for (long long i = 0, at = lo; i < count && !bad; i++, at += st)
            bad = bytebuf_append(&b, obj->u.s.p + off[at], off[at + 1] - off[at]);
        free(off);
        jjValue *r = bad ? jj_fail(c, "out of memory") : jj_str(c, b.data ? b.data : "", b.len);
        bytebuf_free(&b);
        return r;
    }
    jjValue *r = jj_list(c, (size_t)count, obj->u.l.tuple);
    for (long long i = 0, at = lo; r && i < count; i++, at += st) r->u.l.v[i] = obj->u.l.v[at];
    return r;
}

static jjValue *eval_compare(jjCtx *c, const jjNode *n) {
    jjValue *left = eval(c, n->list[0]);
    for (int i = 0; left && i < n->n - 1; i++) {
        jjValue *right = eval(c, n->list[i + 1]);
        if (!right) return NULL;
        const char *op = n->names[i];
        int r;
        if (!strcmp(op, "==")) r = jj_equal(c, left, right);
        else if (!strcmp(op, "!=")) r = !jj_equal(c, left, right);
        else if (!strcmp(op, "in") || !strcmp(op, "not in")) {
            if ((r = jj_contains(c, right, left)) < 0) return NULL;
            if (op[0] == 'n') r = !r;
        } else {
            int ok, cmp = jj_compare(c, left, right, &ok);
            if (jj_failed(c)) return NULL;
            if (!ok) {
                const jjValue *u = left->type == JV_UNDEF ? left : right->type == JV_UNDEF ? right : NULL;
                if (u) return jj_fail_undef(c, u);
                return jj_fail(c, "'%s' not supported between instances of '%s' and '%s'", op, jj_type_name(left),
                               jj_type_name(right));
            }
            r = !strcmp(op, "<") ? cmp < 0 : !strcmp(op, ">") ? cmp > 0 : !strcmp(op, "<=") ? cmp <= 0 : cmp >= 0;
        }
        if (jj_failed(c)) return NULL;
        if (!r) return jj_bool(0);
        left = right;
    }
    return left ? jj_bool(1) : NULL;
}

static jjValue *eval(jjCtx *c, const jjNode *n) {
    if (step(c, n)) return NULL;
    jjValue *a, *b;
    switch (n->kind) {
    case N_CONST: return n->value;
    case N_NAME: return lookup(c, n->name);
    case N_LIST: case N_TUPLE: {
        jjValue *l = jj_list(c, (size_t)n->n, n->kind == N_TUPLE);
        for (int i = 0; l && i < n->n; i++)
            if (!(l->u.l.v[i] = eval(c, n->list[i]))) return NULL;
        return l;
    }
    case N_DICT: {
        jjValue *d = jj_dict(c);
        for (int i = 0; d && i < n->n; i++) {
            if (!(a = eval(c, n->list[i])) || !(b = eval(c, n->list2[i]))) return NULL;
            if (a->type == JV_LIST && !a->u.l.tuple) return jj_fail(c, "unhashable type: 'list'");
            if (a->type == JV_DICT) return jj_fail(c, "unhashable type: 'dict'");
            if (jj_dict_set(c, d, a, b)) return NULL;
        }
        return d;
    }
    case N_GETATTR:
        if (!(a = eval(c, n->a))) return NULL;
        return jj_getattr(c, a, n->name);
    case N_GETITEM:
        if (!(a = eval(c, n->a)) || !(b = eval(c, n->b))) return NULL;
        return jj_getitem(c, a, b);
    case N_SLICE: return eval_slice(c, n);
    case N_CALL: {
        jjArgs args;
        if (!(a = eval(c, n->a)) || eval_args(c, n, &args)) return NULL;
        return jj_call(c, a, &args);
    }
    case N_FILTER: {
        jjArgs args;
        if (!(a = eval(c, n->a)) || eval_args(c, n, &args)) return NULL;
        return n->fn->fn(c, a, &args);
    }
    case N_TEST: {
        jjArgs args;
        if (!(a = eval(c, n->a)) || eval_args(c, n, &args) || !(b = jj_run_test(c, n->fn, a, &args))) return NULL;
        return jj_bool(n->negate ? !b->u.b : b->u.b);
    }
    case N_NEG: case N_POS:
        if (!(a = eval(c, n->a))) return NULL;
        if (!jj_is_number(a)) {
            if (a->type == JV_UNDEF) return jj_fail_undef(c, a);
            return jj_fail(c, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jj_type_name(a));
        }
        if (n->kind == N_POS) return a->type == JV_BOOL ? jj_int(c, a->u.b) : a;
        if (a->type == JV_FLOAT) return jj_float(c, -a->u.f);
        if (a->type == JV_INT && a->u.i == LLONG_MIN) return jj_fail(c, "integer overflow");
        return jj_int(c, a->type == JV_INT ? -a->u.i : -a->u.b);
    case N_NOT:
        if (!(a = eval(c, n->a))) return NULL;
        return jj_bool(!jj_truthy(a));
    case N_AND:
        if (!(a = eval(c, n->a))) return NULL;
        return jj_truthy(a) ? eval(c, n->b) : a;
    case N_OR:
        if (!(a = eval(c, n->a))) return NULL;
        return jj_truthy(a) ? a : eval(c, n->b);
    case N_BINOP:
        if (!(a = eval(c, n->a)) || !(b = eval(c, n->b))) return NULL;
        return jj_binop(c, n->name, a, b);
    case N_COMPARE: return eval_compare(c, n);
    case N_COND:
        if (!(a = eval(c, n->a))) return NULL;
        if (jj_truthy(a)) return eval(c, n->b);
        return n->c ? eval(c, n->c) : jj_undef(c, "the conditional expression's condition was false and it has no else");
    default:
        return jj_fail(c, "internal error: statement evaluated as an expression");
    }
}

/* ---- macros ---- */

static jjValue *call_macro(jjCtx *c, const jjNode *m, jjArgs *a) {
    if (c->depth >= c->lim->max_depth)
        return jj_fail(c, "macro '%s': calls nested more than %d deep", m->name, c->lim->max_depth);
    int n = m->n2;
    jjValue **vals = jj_ctx_alloc(c, ((size_t)n + 1) * sizeof(jjValue *));
    if (!vals) return NULL;
    char what[160];
    snprintf(what, sizeof(what), "macro '%s'", m->name);
    if (jj_bind(c, what, a, m->names, n, vals)) return NULL;
    jjFrame *saved = c->frame, *f = frame_push(c, c->root);
    if (!f) return NULL;
    c->frame = f;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        jjValue *v = vals[i];
        if (!v) v = m->list2[i] ? eval(c, m->list2[i]) : jj_undeff(c, "macro '%s': parameter '%s' was not given", m->name, m->names[i]);
        bad = !v || set_var(c, m->names[i], v);
    }
    bytebuf out = {0}, *saved_out = c->out;
    c->out = &out;
    c->depth++;
    if (!bad) bad = exec_body(c, m->list, m->n) < 0;
    c->depth--;
    c->out = saved_out;
    c->frame = saved;
    jjValue *r = bad ? NULL : jj_str(c, out.data ? out.data : "", out.len);
    bytebuf_free(&out);
    return r;
}

jjValue *jj_call(jjCtx *c, jjValue *fn, jjArgs *a) {
    if (fn->type == JV_FUNC) return fn->u.fn.fn->fn(c, fn->u.fn.self, a);
    if (fn->type == JV_MACRO) return call_macro(c, fn->u.macro, a);
    if (fn->type == JV_UNDEF) return jj_fail_undef(c, fn);
    return jj_fail(c, "'%s' object is not callable", jj_type_name(fn));
}

/* ---- statements ---- */

static int exec_for(jjCtx *c, const jjNode *n) {
    jjValue *seq = eval(c, n->b);
    if (!seq || !(seq = jj_iterate(c, seq))) return -1;
    jjFrame *outer = c->frame, *inner = frame_push(c, outer);
    if (!inner) return -1;
    jjValue **items = seq->u.l.v;
    size_t count = seq->u.l.n;
    if (n->c) {
        /* `for x in xs if cond`: filtered first, so loop.length and
         * loop.last count only the items kept. */
        jjValue *kept = jj_list(c, count, 0);
        if (!kept) return -1;
        size_t k = 0;
        for (size_t i = 0; i < count; i++) {
            if (step(c, n)) return -1;
            inner->n = 0;
            c->frame = inner;
            if (assign(c, n->a, items[i])) return -1;
            jjValue *ok = eval(c, n->c);
            c->frame = outer;
            if (!ok) return -1;
            if (jj_truthy(ok)) kept->u.l.v[k++] = items[i];
        }
        items = kept->u.l.v;
        count = k;
    }
    if (!count) {
        if (!n->n2) return 0;
        c->frame = inner;
        int r = exec_body(c, n->list2, n->n2);
        c->frame = outer;
        return r < 0 ? -1 : 0;
    }
    jjLoop *loop = jj_ctx_alloc(c, sizeof(*loop));
    jjValue *lv = loop ? jj_ctx_alloc(c, sizeof(*lv)) : NULL;
    if (!lv) return -1;
    loop->items = items;
    loop->n = count;
    lv->type = JV_LOOP;
    lv->u.loop = loop;
    for (size_t i = 0; i < count; i++) {
        if (step(c, n)) return -1;   /* an empty body still costs its iterations */
        loop->i = i;
        /* Each iteration starts with no variables of its own. */
        inner->n = 0;
        c->frame = inner;
        if (assign(c, n->a, items[i]) || set_var(c, "loop", lv)) return -1;
        int r = exec_body(c, n->list, n->n);
        c->frame = outer;
        if (r < 0) return -1;
        if (r == EXEC_BREAK) break;
    }
    return 0;
}

static int exec_set(jjCtx *c, const jjNode *n) {
    jjValue *v = eval(c, n->b);
    if (!v) return -1;
    if (n->a->kind != N_GETATTR) return assign(c, n->a, v);
    jjValue *ns = lookup(c, n->a->a->name);
    if (!ns) return -1;
    if (ns->type != JV_NS) {
        jj_fail(c, "cannot assign attribute '%s' on '%s', which is not a namespace()", n->a->name, n->a->a->name);
        return -1;
    }
    jjValue *k = jj_cstr(c, n->a->name);
    return k ? jj_dict_set(c, ns, k, v) : -1;
}

static int exec_body(jjCtx *c, jjNode *const *body, int n) {
    for (int i = 0; i < n; i++) {
        const jjNode *s = body[i];
        if (step(c, s)) return -1;
        int r = EXEC_OK;
        jjValue *v;
        switch (s->kind) {
        case S_TEXT:
            r = emit(c, s->value->u.s.p, s->value->u.s.len);
            break;
        case S_PRINT: {
            if (!(v = eval(c, s->a))) return -1;
            if (v->type == JV_STR) {
                r = emit(c, v->u.s.p, v->u.s.len);
            } else {
                bytebuf b = {0};
                r = jj_write_str(c, &b, v) ? -1 : emit(c, b.data ? b.data : "", b.len);
                bytebuf_free(&b);
            }
            break;
        }
        case S_IF:
            if (!(v = eval(c, s->a))) return -1;
            r = jj_truthy(v) ? exec_body(c, s->list, s->n) : exec_body(c, s->list2, s->n2);
            break;
        case S_FOR: r = exec_for(c, s); break;
        case S_SET: r = exec_set(c, s); break;
        case S_SET_BLOCK: {
            bytebuf out = {0}, *saved = c->out;
            c->out = &out;
            r = exec_body(c, s->list, s->n);
            c->out = saved;
            if (r >= 0) {
                v = jj_str(c, out.data ? out.data : "", out.len);
                r = v ? set_var(c, s->a->name, v) : -1;
            }
            bytebuf_free(&out);
            break;
        }
        case S_MACRO: {
            jjValue *m = jj_ctx_alloc(c, sizeof(*m));
            if (!m) return -1;
            m->type = JV_MACRO;
            m->u.macro = s;
            r = set_var(c, s->name, m);
            break;
        }
        case S_BREAK: return EXEC_BREAK;
        case S_CONTINUE: return EXEC_CONTINUE;
        case S_BLOCK: r = exec_body(c, s->list, s->n); break;
        default:
            jj_fail(c, "internal error: expression executed as a statement");
            return -1;
        }
        if (r) return r;
    }
    return EXEC_OK;
}

int jinja_render(const jjTemplate *t, const json_t *vars, const jjLimits *lim, char **out, size_t *out_len,
                 rlError *err) {
    jjLimits def;
    if (!lim) {
        jinja_limits_default(&def);
        lim = &def;
    }
    *out = NULL;
    if (out_len) *out_len = 0;
    jj_values_init();
    bytebuf b = {0};
    jjCtx c = {.lim = lim, .err = err, .out = &b, .t = t};
    c.arena.limit = lim->max_memory;
    err->code = RL_OK;
    int rc = -1;
    jjFrame *globals = frame_push(&c, NULL);
    if (!globals) goto done;
    if (vars) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val) {
            jjValue *k = jj_cstr(&c, key), *v = k ? jj_from_json(&c, val) : NULL;
            c.frame = globals;
            if (!v || set_var(&c, k->u.s.p, v)) goto done;
        }
    }
    if (!(c.root = c.frame = frame_push(&c, globals))) goto done;
    if (exec_body(&c, t->body, t->n) < 0 || jj_failed(&c)) goto done;
    if (!(*out = bytebuf_steal(&b, out_len))) {
        if (!(*out = strdup(""))) {
            rl_error(err, RL_EMEMORY, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    if (rc && err->code == RL_OK) rl_error(err, RL_EMEMORY, "out of memory rendering %s", t->name);
    bytebuf_free(&b);
    jj_arena_free(&c.arena);
    return rc;
}
