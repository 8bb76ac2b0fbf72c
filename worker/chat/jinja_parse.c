/* jinja_parse.c: tokens into a syntax tree, by Jinja's grammar (the
 * precedence of jinja2/parser.py: `is` and `|` bind tighter than
 * arithmetic, `**` is left-associative, `x if c` without else is allowed).
 *
 * This is also where a template is refused: every tag, filter, test,
 * function and method is looked up while parsing, so a template that uses
 * anything the interpreter lacks fails at load, naming it, and never
 * half-renders later. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja_impl.h"
#include "worker/lib/utf8.h"

#define JJ_MAX_PARSE_DEPTH 200

/* A growable node list in the template's arena. */
typedef struct nodeList {
    jjNode **v;
    int n, cap;
} nodeList;

typedef struct jjParser {
    const jjToken *tok;
    size_t i, n;
    jjTemplate *t;
    rlError *err;
    int depth;
    int loops;                  /* for-loops around the statement being parsed */
    nodeList calls;             /* calls of names that must be macros */
    nodeList macros;
} jjParser;

static int p_fail(jjParser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int p_fail(jjParser *p, const char *fmt, ...) {
    if (p->err->code != RL_OK) return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return rl_error(p->err, RL_EINPUT, "%s line %d: %s", p->t->name, p->tok[p->i].line, msg);
}

static const jjToken *cur(jjParser *p) {
    return &p->tok[p->i];
}

static const jjToken *next(jjParser *p) {
    const jjToken *t = &p->tok[p->i];
    if (p->i + 1 < p->n) p->i++;
    return t;
}

static int is_op(const jjToken *t, const char *op) {
    return t->type == TK_OP && t->len == strlen(op) && !memcmp(t->s, op, t->len);
}

static int is_name(const jjToken *t, const char *name) {
    return t->type == TK_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}

static const char *describe(const jjToken *t, char *buf, size_t cap) {
    switch (t->type) {
    case TK_EOF: return "the end of the template";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_END: return "'%}'";
    case TK_TEXT: return "text";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s); return buf;
    }
}

static int expect_op(jjParser *p, const char *op) {
    char buf[64];
    if (is_op(cur(p), op)) {
        next(p);
        return 0;
    }
    return p_fail(p, "expected '%s', found %s", op, describe(cur(p), buf, sizeof(buf)));
}

static int expect_type(jjParser *p, jjTok type, const char *what) {
    char buf[64];
    if (cur(p)->type == type) {
        next(p);
        return 0;
    }
    return p_fail(p, "expected %s, found %s", what, describe(cur(p), buf, sizeof(buf)));
}

static void *p_alloc(jjParser *p, size_t n) {
    void *m = jj_alloc(&p->t->arena, n);
    if (!m) rl_error(p->err, RL_EMEMORY, "out of memory");
    return m;
}

static char *p_strdup(jjParser *p, const char *s, size_t len) {
    char *d = p_alloc(p, len + 1);
    if (d) memcpy(d, s, len);
    return d;
}

static jjNode *node(jjParser *p, jjKind kind) {
    jjNode *nd = p_alloc(p, sizeof(*nd));
    if (nd) {
        nd->kind = kind;
        nd->line = cur(p)->line;
    }
    return nd;
}

static int list_push(jjParser *p, nodeList *l, jjNode *nd) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        jjNode **v = p_alloc(p, (size_t)cap * sizeof(*v));
        if (!v) return -1;
        if (l->n) memcpy(v, l->v, (size_t)l->n * sizeof(*v));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = nd;
    return 0;
}

static int name_push(jjParser *p, const char ***v, size_t *n, size_t *cap, const char *s) {
    if (*n == *cap) {
        size_t c2 = *cap ? *cap * 2 : 8;
        const char **nv = realloc(*v, c2 * sizeof(*nv));
        if (!nv) return rl_error(p->err, RL_EMEMORY, "out of memory");
        *v = nv;
        *cap = c2;
    }
    (*v)[(*n)++] = s;
    return 0;
}

static jjNode *constant(jjParser *p, jjType type) {
    jjNode *nd = node(p, N_CONST);
    if (nd && !(nd->value = p_alloc(p, sizeof(jjValue)))) return NULL;
    if (nd) nd->value->type = type;
    return nd;
}

static jjNode *parse_expr(jjParser *p);
static jjNode *parse_or(jjParser *p);
static jjNode *parse_unary(jjParser *p, int with_filter);
static jjNode *parse_tuple(jjParser *p, int with_cond, int explicit_parens);

static int enter(jjParser *p) {
    if (++p->depth > JJ_MAX_PARSE_DEPTH) return p_fail(p, "the template nests more than %d levels deep", JJ_MAX_PARSE_DEPTH);
    return 0;
}

/* ( args ) after the '(' is current: positional, then name=value. */
static int parse_call_args(jjParser *p, jjNode *call) {
    nodeList pos = {0}, kw = {0};
    const char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    int rc = -1;
    if (expect_op(p, "(")) return -1;
    while (!is_op(cur(p), ")")) {
        if (pos.n || kw.n) {
            if (expect_op(p, ",")) goto done;
            if (is_op(cur(p), ")")) break;
        }
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) {
            p_fail(p, "*args and **kwargs in calls are not supported");
            goto done;
        }
        if (cur(p)->type == TK_NAME && p->i + 1 < p->n && is_op(&p->tok[p->i + 1], "=")) {
            const jjToken *nm = next(p);
            next(p);
            jjNode *v = parse_expr(p);
            char *s = v ? p_strdup(p, nm->s, nm->len) : NULL;
            if (!s || list_push(p, &kw, v) || name_push(p, &names, &n_names, &cap_names, s)) goto done;
        } else {
            if (kw.n) {
                p_fail(p, "a positional argument follows a keyword argument");
                goto done;
            }
            jjNode *v = parse_expr(p);
            if (!v || list_push(p, &pos, v)) goto done;
        }
    }
    next(p);
    call->list = pos.v, call->n = pos.n;
    call->list2 = kw.v, call->n2 = kw.n;
    if (n_names) {
        call->names = p_alloc(p, n_names * sizeof(char *));
        if (!call->names) goto done;
        memcpy(call->names, names, n_names * sizeof(char *));
    }
    rc = 0;
done:
    free(names);
    return rc;
}

static jjNode *parse_filter(jjParser *p, jjNode *operand) {
    next(p);   /* | */
    const jjToken *nm = cur(p);
    if (expect_type(p, TK_NAME, "a filter name")) return NULL;
    jjNode *f = node(p, N_FILTER);
    if (!f || !(f->name = p_strdup(p, nm->s, nm->len))) return NULL;
    if (!(f->fn = jj_find_filter(f->name))) {
        p_fail(p, "the filter '%s' is not supported", f->name);
        return NULL;
    }
    f->a = operand;
    if (is_op(cur(p), "(") && parse_call_args(p, f)) return NULL;
    return f;
}

static jjNode *parse_postfix(jjParser *p, jjNode *nd);

static jjNode *parse_test(jjParser *p, jjNode *operand) {
    next(p);   /* is */
    jjNode *t = node(p, N_TEST);
    if (!t) return NULL;
    if (is_name(cur(p), "not")) {
        next(p);
        t->negate = 1;
    }
    const jjToken *nm = cur(p);
    if (expect_type(p, TK_NAME, "a test name")) return NULL;
    if (!(t->name = p_strdup(p, nm->s, nm->len))) return NULL;
    if (!(t->fn = jj_find_test(t->name))) {
        p_fail(p, "the test '%s' is not supported", t->name);
        return NULL;
    }
    t->a = operand;
    const jjToken *c = cur(p);
    if (is_op(c, "(")) {
        if (parse_call_args(p, t)) return NULL;
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            p_fail(p, "tests cannot be chained with 'is'");
            return NULL;
        }
        jjNode *arg = parse_unary(p, 0);
        if (!arg || !(t->list = p_alloc(p, sizeof(jjNode *)))) return NULL;
        t->list[0] = arg;
        t->n = 1;
    }
    return t;
}

static jjNode *parse_call(jjParser *p, jjNode *callee) {
    jjNode *call = node(p, N_CALL);
    if (!call) return NULL;
    call->a = callee;
    if (callee->kind == N_NAME) {
        if (!jj_find_global(callee->name) && list_push(p, &p->calls, call)) return NULL;
    } else if (callee->kind == N_GETATTR) {
        if (!jj_method_exists(callee->name)) {
            p_fail(p, "the method '%s' is not supported", callee->name);
            return NULL;
        }
    } else {
        p_fail(p, "only functions, macros and methods can be called");
        return NULL;
    }
    if (parse_call_args(p, call)) return NULL;
    return call;
}

static jjNode *parse_subscript(jjParser *p, jjNode *obj) {
    if (is_op(next(p), ".")) {
        const jjToken *t = next(p);
        if (t->type == TK_NAME) {
            jjNode *g = node(p, N_GETATTR);
            if (!g || !(g->name = p_strdup(p, t->s, t->len))) return NULL;
            g->a = obj;
            return g;
        }
        if (t->type == TK_INT) {
            jjNode *g = node(p, N_GETITEM), *k = constant(p, JV_INT);
            if (!g || !k) return NULL;
            k->value->u.i = t->i;
            g->a = obj;
            g->b = k;
            return g;
        }
        p_fail(p, "expected an attribute name after '.'");
        return NULL;
    }
    /* [ index ] or [ start : stop : step ] */
    jjNode *parts[3] = {NULL, NULL, NULL};
    int colons = 0;
    if (!is_op(cur(p), ":") && !(parts[0] = parse_expr(p))) return NULL;
    while (colons < 2 && is_op(cur(p), ":")) {
        next(p);
        colons++;
        if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !(parts[colons] = parse_expr(p))) return NULL;
    }
    if (expect_op(p, "]")) return NULL;
    if (!colons) {
        jjNode *g = node(p, N_GETITEM);
        if (!g) return NULL;
        g->a = obj;
        g->b = parts[0];
        return g;
    }
    jjNode *s = node(p, N_SLICE);
    if (!s || !(s->list = p_alloc(p, 3 * sizeof(jjNode *)))) return NULL;
    memcpy(s->list, parts, sizeof(parts));
    s->n = 3;
    s->a = obj;
    return s;
}

static jjNode *parse_postfix(jjParser *p, jjNode *nd) {
    while (nd) {
        if (is_op(cur(p), ".") || is_op(cur(p), "[")) nd = parse_subscript(p, nd);
        else if (is_op(cur(p), "(")) nd = parse_call(p, nd);
        else break;
    }
    return nd;
}

static jjNode *parse_filter_expr(jjParser *p, jjNode *nd) {
    while (nd) {
        if (is_op(cur(p), "|")) nd = parse_filter(p, nd);
        else if (is_name(cur(p), "is")) nd = parse_test(p, nd);
        else if (is_op(cur(p), "(")) nd = parse_call(p, nd);
        else break;
    }
    return nd;
}

static jjNode *parse_seq(jjParser *p, jjKind kind, const char *close) {
    jjNode *nd = node(p, kind);
    nodeList items = {0}, values = {0};
    if (!nd) return NULL;
    next(p);
    while (!is_op(cur(p), close)) {
        if (items.n) {
            if (expect_op(p, ",")) return NULL;
            if (is_op(cur(p), close)) break;
        }
        jjNode *k = parse_expr(p);
        if (!k || list_push(p, &items, k)) return NULL;
        if (kind == N_DICT) {
            jjNode *v = expect_op(p, ":") ? NULL : parse_expr(p);
            if (!v || list_push(p, &values, v)) return NULL;
        }
    }
    if (expect_op(p, close)) return NULL;
    nd->list = items.v, nd->n = items.n;
    nd->list2 = values.v, nd->n2 = values.n;
    return nd;
}

static jjNode *parse_primary(jjParser *p) {
    const jjToken *t = cur(p);
    char buf[64];
    jjNode *nd;
    switch (t->type) {
    case TK_NAME:
        next(p);
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            if ((nd = constant(p, JV_BOOL))) nd->value->u.b = t->s[0] == 't' || t->s[0] == 'T';
            return nd;
        }
        if (is_name(t, "none") || is_name(t, "None")) return constant(p, JV_NONE);
        if ((nd = node(p, N_NAME)) && !(nd->name = p_strdup(p, t->s, t->len))) return NULL;
        return nd;
    case TK_STRING: {
        /* Adjacent literals concatenate, as in Python. */
        size_t len = 0, i = p->i;
        while (p->tok[i].type == TK_STRING) len += p->tok[i++].len;
        char *s = p_alloc(p, len + 1);
        if (!s || !(nd = constant(p, JV_STR))) return NULL;
        size_t o = 0;
        while (cur(p)->type == TK_STRING) {
            memcpy(s + o, cur(p)->s, cur(p)->len);
            o += cur(p)->len;
            next(p);
        }
        nd->value->u.s.p = s;
        nd->value->u.s.len = len;
        return nd;
    }
    case TK_INT:
        next(p);
        if ((nd = constant(p, JV_INT))) nd->value->u.i = t->i;
        return nd;
    case TK_FLOAT:
        next(p);
        if ((nd = constant(p, JV_FLOAT))) nd->value->u.f = t->f;
        return nd;
    case TK_OP:
        if (is_op(t, "(")) {
            next(p);
            nd = parse_tuple(p, 1, 1);
            if (!nd || expect_op(p, ")")) return NULL;
            return nd;
        }
        if (is_op(t, "[")) return parse_seq(p, N_LIST, "]");
        if (is_op(t, "{")) return parse_seq(p, N_DICT, "}");
        break;
    default:
        break;
    }
    p_fail(p, "unexpected %s in an expression", describe(t, buf, sizeof(buf)));
    return NULL;
}

static jjNode *parse_unary(jjParser *p, int with_filter) {
    if (enter(p)) return NULL;
    jjNode *nd;
    if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
        nd = node(p, is_op(cur(p), "-") ? N_NEG : N_POS);
        next(p);
        if (nd && !(nd->a = parse_unary(p, 0))) nd = NULL;
    } else {
        nd = parse_primary(p);
    }
    nd = parse_postfix(p, nd);
    if (with_filter) nd = parse_filter_expr(p, nd);
    p->depth--;
    return nd;
}

static jjNode *binop(jjParser *p, const char *op, jjNode *a, jjNode *b) {
    jjNode *nd = a && b ? node(p, N_BINOP) : NULL;
    if (nd) nd->name = op, nd->a = a, nd->b = b;
    return nd;
}

static jjNode *parse_pow(jjParser *p) {
    jjNode *nd = parse_unary(p, 1);
    while (nd && is_op(cur(p), "**")) {
        next(p);
        nd = binop(p, "**", nd, parse_unary(p, 1));
    }
    return nd;
}

static jjNode *parse_math2(jjParser *p) {
    jjNode *nd = parse_pow(p);
    static const char *const ops[] = {"*", "/", "//", "%"};
    for (int k = 0; nd && k < 4; k++)
        if (is_op(cur(p), ops[k])) {
            next(p);
            nd = binop(p, ops[k], nd, parse_pow(p));
            k = -1;
        }
    return nd;
}

static jjNode *parse_concat(jjParser *p) {
    jjNode *nd = parse_math2(p);
    while (nd && is_op(cur(p), "~")) {
        next(p);
        nd = binop(p, "~", nd, parse_math2(p));
    }
    return nd;
}

static jjNode *parse_math1(jjParser *p) {
    jjNode *nd = parse_concat(p);
    while (nd && (is_op(cur(p), "+") || is_op(cur(p), "-"))) {
        const char *op = is_op(next(p), "+") ? "+" : "-";
        nd = binop(p, op, nd, parse_concat(p));
    }
    return nd;
}

static jjNode *parse_compare(jjParser *p) {
    jjNode *first = parse_math1(p);
    nodeList operands = {0};
    const char *ops[64];
    int n_ops = 0;
    static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">="};
    while (first) {
        const char *op = NULL;
        for (int k = 0; k < 6; k++)
            if (is_op(cur(p), cmp[k])) op = cmp[k];
        if (op) {
            next(p);
        } else if (is_name(cur(p), "in")) {
            next(p);
            op = "in";
        } else if (is_name(cur(p), "not") && p->i + 1 < p->n && is_name(&p->tok[p->i + 1], "in")) {
            next(p);
            next(p);
            op = "not in";
        } else {
            break;
        }
        if (n_ops == 64) {
            p_fail(p, "more than 64 chained comparisons");
            return NULL;
        }
        if (!operands.n && list_push(p, &operands, first)) return NULL;
        jjNode *rhs = parse_math1(p);
        if (!rhs || list_push(p, &operands, rhs)) return NULL;
        ops[n_ops++] = op;
    }
    if (!first || !n_ops) return first;
    jjNode *nd = node(p, N_COMPARE);
    if (!nd || !(nd->names = p_alloc(p, (size_t)n_ops * sizeof(char *)))) return NULL;
    memcpy(nd->names, ops, (size_t)n_ops * sizeof(char *));
    nd->list = operands.v;
    nd->n = operands.n;
    return nd;
}

static jjNode *parse_not(jjParser *p) {
    if (is_name(cur(p), "not")) {
        if (enter(p)) return NULL;
        jjNode *nd = node(p, N_NOT);
        next(p);
        if (nd && !(nd->a = parse_not(p))) nd = NULL;
        p->depth--;
        return nd;
    }
    return parse_compare(p);
}

static jjNode *parse_and(jjParser *p) {
    jjNode *nd = parse_not(p);
    while (nd && is_name(cur(p), "and")) {
        next(p);
        jjNode *o = node(p, N_AND);
        if (o && (o->a = nd, o->b = parse_not(p))) nd = o;
        else nd = NULL;
    }
    return nd;
}

static jjNode *parse_or(jjParser *p) {
    jjNode *nd = parse_and(p);
    while (nd && is_name(cur(p), "or")) {
        next(p);
        jjNode *o = node(p, N_OR);
        if (o && (o->a = nd, o->b = parse_and(p))) nd = o;
        else nd = NULL;
    }
    return nd;
}

/* x if cond [else y] */
static jjNode *parse_expr(jjParser *p) {
    if (enter(p)) return NULL;
    jjNode *nd = parse_or(p);
    while (nd && is_name(cur(p), "if")) {
        next(p);
        jjNode *c = node(p, N_COND);
        if (!c || !(c->a = parse_or(p))) {
            nd = NULL;
            break;
        }
        c->b = nd;
        if (is_name(cur(p), "else")) {
            next(p);
            if (!(c->c = parse_expr(p))) {
                nd = NULL;
                break;
            }
        }
        nd = c;
    }
    p->depth--;
    return nd;
}

/* a, b, c as a tuple; a lone expression as itself.  with_cond 0 keeps a
 * trailing `if` for the for-loop's filter. */
static jjNode *parse_tuple(jjParser *p, int with_cond, int explicit_parens) {
    nodeList items = {0};
    int comma = 0;
    for (;;) {
        const jjToken *c = cur(p);
        if (items.n) {
            if (!is_op(c, ",")) break;
            next(p);
            comma = 1;
            c = cur(p);
        }
        if (c->type == TK_VAR_END || c->type == TK_BLOCK_END || is_op(c, ")") || is_name(c, "in") ||
            (!with_cond && is_name(c, "if")) || (!with_cond && is_name(c, "recursive")))
            break;
        jjNode *e = with_cond ? parse_expr(p) : parse_or(p);
        if (!e || list_push(p, &items, e)) return NULL;
    }
    if (items.n == 1 && !comma) return items.v[0];
    if (!items.n && !explicit_parens) {
        char buf[64];
        p_fail(p, "expected an expression, found %s", describe(cur(p), buf, sizeof(buf)));
        return NULL;
    }
    jjNode *nd = node(p, N_TUPLE);
    if (nd) nd->list = items.v, nd->n = items.n;
    return nd;
}

/* for/set targets: a name, names separated by commas, or (set only) ns.attr. */
static jjNode *parse_target(jjParser *p, int allow_attr) {
    nodeList names = {0};
    int paren = is_op(cur(p), "(");
    if (paren) next(p);
    for (;;) {
        const jjToken *t = cur(p);
        if (expect_type(p, TK_NAME, "a variable name")) return NULL;
        jjNode *nd = node(p, N_NAME);
        if (!nd || !(nd->name = p_strdup(p, t->s, t->len))) return NULL;
        if (allow_attr && !names.n && is_op(cur(p), ".")) {
            next(p);
            const jjToken *a = cur(p);
            if (expect_type(p, TK_NAME, "an attribute name")) return NULL;
            jjNode *g = node(p, N_GETATTR);
            if (!g || !(g->name = p_strdup(p, a->s, a->len))) return NULL;
            g->a = nd;
            return g;
        }
        if (list_push(p, &names, nd)) return NULL;
        if (!is_op(cur(p), ",")) break;
        next(p);
    }
    if (paren && expect_op(p, ")")) return NULL;
    if (names.n == 1) return names.v[0];
    jjNode *tu = node(p, N_TUPLE);
    if (tu) tu->list = names.v, tu->n = names.n;
    return tu;
}

static int parse_body(jjParser *p, const char *const *ends, nodeList *out);

/* The name of the block tag at the cursor ({% name ...), or NULL. */
static const jjToken *tag_name(jjParser *p) {
    if (cur(p)->type != TK_BLOCK_BEGIN || p->i + 1 >= p->n) return NULL;
    const jjToken *t = &p->tok[p->i + 1];
    return t->type == TK_NAME ? t : NULL;
}

/* Consume {% end %} (its name already checked by parse_body). */
static int end_tag(jjParser *p) {
    next(p);
    next(p);
    return expect_type(p, TK_BLOCK_END, "'%}'");
}

static jjNode *parse_if(jjParser *p) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jjNode *nd = node(p, S_IF);
    nodeList body = {0}, other = {0};
    if (!nd || !(nd->a = parse_expr(p)) || expect_type(p, TK_BLOCK_END, "'%}'") || parse_body(p, ends, &body))
        return NULL;
    nd->list = body.v, nd->n = body.n;
    const jjToken *t = tag_name(p);
    if (is_name(t, "elif")) {
        next(p);
        next(p);
        jjNode *e = parse_if(p);
        if (!e || list_push(p, &other, e)) return NULL;
    } else if (is_name(t, "else")) {
        static const char *const endif[] = {"endif", NULL};
        if (end_tag(p) || parse_body(p, endif, &other) || end_tag(p)) return NULL;
    } else if (end_tag(p)) {
        return NULL;
    }
    nd->list2 = other.v, nd->n2 = other.n;
    return nd;
}

static jjNode *parse_for(jjParser *p) {
    static const char *const ends[] = {"endfor", "else", NULL}, *const endfor[] = {"endfor", NULL};
    jjNode *nd = node(p, S_FOR);
    nodeList body = {0}, other = {0};
    if (!nd || !(nd->a = parse_target(p, 0))) return NULL;
    if (!is_name(cur(p), "in")) {
        p_fail(p, "expected 'in' in a for loop");
        return NULL;
    }
    next(p);
    if (!(nd->b = parse_tuple(p, 0, 0))) return NULL;
    if (is_name(cur(p), "if")) {
        next(p);
        if (!(nd->c = parse_expr(p))) return NULL;
    }
    if (is_name(cur(p), "recursive")) {
        p_fail(p, "recursive for loops are not supported");
        return NULL;
    }
    if (expect_type(p, TK_BLOCK_END, "'%}'")) return NULL;
    p->loops++;
    int bad = parse_body(p, ends, &body);
    p->loops--;
    if (bad) return NULL;
    if (is_name(tag_name(p), "else") && (end_tag(p) || parse_body(p, endfor, &other))) return NULL;
    if (end_tag(p)) return NULL;
    nd->list = body.v, nd->n = body.n;
    nd->list2 = other.v, nd->n2 = other.n;
    return nd;
}

static jjNode *parse_set(jjParser *p) {
    jjNode *target = parse_target(p, 1);
    if (!target) return NULL;
    if (is_op(cur(p), "=")) {
        next(p);
        jjNode *nd = node(p, S_SET);
        if (!nd || !(nd->b = parse_tuple(p, 1, 0)) || expect_type(p, TK_BLOCK_END, "'%}'")) return NULL;
        nd->a = target;
        return nd;
    }
    if (target->kind != N_NAME) {
        p_fail(p, "a block {%% set %%} assigns one plain name");
        return NULL;
    }
    if (is_op(cur(p), "|")) {
        p_fail(p, "filters on a block {%% set %%} are not supported");
        return NULL;
    }
    static const char *const ends[] = {"endset", NULL};
    jjNode *nd = node(p, S_SET_BLOCK);
    nodeList body = {0};
    if (!nd || expect_type(p, TK_BLOCK_END, "'%}'") || parse_body(p, ends, &body) || end_tag(p)) return NULL;
    nd->a = target;
    nd->list = body.v, nd->n = body.n;
    return nd;
}

static jjNode *parse_macro(jjParser *p) {
    const jjToken *nm = cur(p);
    if (expect_type(p, TK_NAME, "a macro name")) return NULL;
    jjNode *nd = node(p, S_MACRO);
    nodeList defaults = {0}, body = {0};
    const char **params = NULL;
    size_t n_params = 0, cap = 0;
    if (!nd || !(nd->name = p_strdup(p, nm->s, nm->len)) || expect_op(p, "(")) return NULL;
    while (!is_op(cur(p), ")")) {
        if (n_params) {
            if (expect_op(p, ",")) goto fail;
            if (is_op(cur(p), ")")) break;
        }
        const jjToken *a = cur(p);
        if (expect_type(p, TK_NAME, "a parameter name")) goto fail;
        char *s = p_strdup(p, a->s, a->len);
        jjNode *def = NULL;
        if (is_op(cur(p), "=")) {
            next(p);
            if (!(def = parse_expr(p))) goto fail;
        } else if (defaults.n && defaults.v[defaults.n - 1]) {
            p_fail(p, "macro '%s': a parameter without a default follows one with a default", nd->name);
            goto fail;
        }
        if (!s || name_push(p, &params, &n_params, &cap, s) || list_push(p, &defaults, def)) goto fail;
    }
    next(p);
    static const char *const ends[] = {"endmacro", NULL};
    if (expect_type(p, TK_BLOCK_END, "'%}'")) goto fail;
    int loops = p->loops;
    p->loops = 0;
    int bad = parse_body(p, ends, &body);
    p->loops = loops;
    if (bad || end_tag(p)) goto fail;
    if (n_params && !(nd->names = p_alloc(p, n_params * sizeof(char *)))) goto fail;
    if (n_params) memcpy(nd->names, params, n_params * sizeof(char *));
    free(params);
    nd->list = body.v, nd->n = body.n;
    nd->list2 = defaults.v, nd->n2 = defaults.n;
    if (list_push(p, &p->macros, nd)) return NULL;
    return nd;
fail:
    free(params);
    return NULL;
}

static jjNode *parse_statement(jjParser *p) {
    const jjToken *t = cur(p);
    if (t->type == TK_TEXT) {
        jjNode *nd = constant(p, JV_STR);
        next(p);
        if (!nd) return NULL;
        nd->kind = S_TEXT;
        nd->value->u.s.p = t->s;
        nd->value->u.s.len = t->len;
        return nd;
    }
    if (t->type == TK_VAR_BEGIN) {
        next(p);
        jjNode *nd = node(p, S_PRINT);
        if (!nd || !(nd->a = parse_tuple(p, 1, 0)) || expect_type(p, TK_VAR_END, "'}}'")) return NULL;
        return nd;
    }
    next(p);   /* {% */
    const jjToken *nm = cur(p);
    if (expect_type(p, TK_NAME, "a tag name")) return NULL;
    if (is_name(nm, "if")) return parse_if(p);
    if (is_name(nm, "for")) return parse_for(p);
    if (is_name(nm, "set")) return parse_set(p);
    if (is_name(nm, "macro")) return parse_macro(p);
    if (is_name(nm, "break") || is_name(nm, "continue")) {
        if (!p->loops) {
            p_fail(p, "{%% %.*s %%} outside a for loop", (int)nm->len, nm->s);
            return NULL;
        }
        jjNode *nd = node(p, is_name(nm, "break") ? S_BREAK : S_CONTINUE);
        return nd && !expect_type(p, TK_BLOCK_END, "'%}'") ? nd : NULL;
    }
    if (is_name(nm, "generation")) {
        /* transformers' assistant-mask marker: renders its body. */
        static const char *const ends[] = {"endgeneration", NULL};
        jjNode *nd = node(p, S_BLOCK);
        nodeList body = {0};
        if (!nd || expect_type(p, TK_BLOCK_END, "'%}'") || parse_body(p, ends, &body) || end_tag(p)) return NULL;
        nd->list = body.v, nd->n = body.n;
        return nd;
    }
    p_fail(p, "the tag {%% %.*s %%} is not supported", (int)nm->len, nm->s);
    return NULL;
}

/* Statements up to one of the end tags (left unconsumed) or, with no end
 * tags, the end of the template. */
static int parse_body(jjParser *p, const char *const *ends, nodeList *out) {
    if (enter(p)) return -1;
    for (;;) {
        const jjToken *t = cur(p);
        if (t->type == TK_EOF) {
            p->depth--;
            if (!ends) return 0;
            return p_fail(p, "the template ends inside a block: {%% %s %%} is missing", ends[0]);
        }
        const jjToken *nm = tag_name(p);
        if (nm && ends)
            for (const char *const *e = ends; *e; e++)
                if (is_name(nm, *e)) {
                    p->depth--;
                    return 0;
                }
        if (nm && ((nm->len > 3 && !memcmp(nm->s, "end", 3)) || is_name(nm, "elif") || is_name(nm, "else")))
            return p_fail(p, "unexpected {%% %.*s %%}", (int)nm->len, nm->s);
        jjNode *st = parse_statement(p);
        if (!st || list_push(p, out, st)) return -1;
    }
}

int jj_parse(jjTemplate *t, const jjTokens *toks, rlError *err) {
    jjParser p = {.tok = toks->v, .n = toks->n, .t = t, .err = err};
    nodeList body = {0};
    int rc = parse_body(&p, NULL, &body);
    /* Names called as functions must be macros of the template. */
    for (int i = 0; !rc && i < p.calls.n; i++) {
        const jjNode *call = p.calls.v[i];
        int k = 0;
        while (k < p.macros.n && strcmp(p.macros.v[k]->name, call->a->name)) k++;
        if (k == p.macros.n) {
            rc = rl_error(err, RL_EINPUT, "%s line %d: the function '%s' is not supported (known: range, "
                          "namespace, dict, raise_exception, strftime_now, and the template's macros)",
                          t->name, call->line, call->a->name);
        }
    }
    t->body = body.v;
    t->n = body.n;
    return rc;
}

jjTemplate *jinja_load(const char *src, size_t len, const char *name, rlError *err) {
    jjTemplate *t = calloc(1, sizeof(*t));
    jjTokens toks = {0};
    size_t bad_at;
    err->code = RL_OK;   /* the parser keeps the first error it meets */
    if (!t || !(t->name = strdup(name ? name : "template"))) {
        free(t);
        rl_error(err, RL_EMEMORY, "out of memory");
        return NULL;
    }
    if (!utf8_valid(src, len, &bad_at) || memchr(src, 0, len)) {
        rl_error(err, RL_EINPUT, "%s: not valid UTF-8 text (byte %zu)", t->name,
                 memchr(src, 0, len) ? (size_t)((const char *)memchr(src, 0, len) - src) : bad_at);
    } else if (jj_lex(src, len, &t->arena, &toks, err)) {
        rl_error_wrap(err, "%s", t->name);
    } else if (!jj_parse(t, &toks, err)) {
        free(toks.v);
        return t;
    }
    free(toks.v);
    jinja_free(t);
    return NULL;
}

void jinja_free(jjTemplate *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t->name);
    free(t);
}
