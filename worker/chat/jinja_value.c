/* jinja_value.c: the interpreter's values and the Python behaviour they
 * must copy exactly (str(), repr(), ==, <, truthiness, json.dumps), since
 * a rendered prompt that differs from transformers' by one space is a
 * different prompt to the model. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "worker/chat/jinja_impl.h"

/* ---- arena ---- */

struct jjChunk {
    jjChunk *next;
    size_t used, cap;
    max_align_t data[];
};

#define JJ_CHUNK (64 * 1024)

void *jj_alloc(jjArena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    if (a->limit && (n > a->limit || a->used > a->limit - n)) return NULL;
    jjChunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > JJ_CHUNK ? n : JJ_CHUNK;
        if (!(h = malloc(sizeof(*h) + cap))) return NULL;
        h->used = 0;
        h->cap = cap;
        /* A large block goes behind the current chunk, which keeps its room. */
        if (a->head && n > JJ_CHUNK) {
            h->next = a->head->next;
            a->head->next = h;
        } else {
            h->next = a->head;
            a->head = h;
        }
    }
    void *p = (char *)h->data + h->used;
    h->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(jjArena *a) {
    for (jjChunk *h = a->head, *next; h; h = next) {
        next = h->next;
        free(h);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- errors ---- */

jjValue *jj_fail(jjCtx *c, const char *fmt, ...) {
    if (c->err->code != RL_OK) return NULL;
    char msg[RL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rl_error(c->err, RL_EINPUT, "%s line %d: %s", c->t ? c->t->name : "template", c->line, msg);
    return NULL;
}

int jj_failed(const jjCtx *c) {
    return c->err->code != RL_OK;
}

static void fail_memory(jjCtx *c) {
    jj_fail(c, "the template needs more than %zu MiB of memory to render", c->lim->max_memory >> 20);
}

void *jj_ctx_alloc(jjCtx *c, size_t n) {
    void *p = jj_alloc(&c->arena, n);
    if (!p) fail_memory(c);
    return p;
}

int jj_room(jjCtx *c, size_t n) {
    if (!c->arena.limit || n <= c->arena.limit - c->arena.used) return 0;
    fail_memory(c);
    return -1;
}

/* ---- constructors ---- */

static jjValue v_none = {.type = JV_NONE};
static jjValue v_true = {.type = JV_BOOL, .u.b = 1};
static jjValue v_false = {.type = JV_BOOL, .u.b = 0};

jjValue *jj_none(void) {
    return &v_none;
}

jjValue *jj_bool(int b) {
    return b ? &v_true : &v_false;
}

static jjValue *value_new(jjCtx *c, jjType type) {
    jjValue *v = jj_ctx_alloc(c, sizeof(*v));
    if (v) v->type = type;
    return v;
}

jjValue *jj_undef(jjCtx *c, const char *why) {
    jjValue *v = value_new(c, JV_UNDEF);
    if (v) v->u.undef = why;
    return v;
}

jjValue *jj_undeff(jjCtx *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    jjValue *s = jj_cstr(c, msg);
    return s ? jj_undef(c, s->u.s.p) : NULL;
}

jjValue *jj_fail_undef(jjCtx *c, const jjValue *u) {
    return jj_fail(c, "%s", u->u.undef ? u->u.undef : "a value is undefined");
}

/* Small integers (loop indexes, lengths) are shared instead of allocated,
 * as Python shares them. */
#define JJ_SMALL_INTS 1024
static jjValue small_ints[JJ_SMALL_INTS];
static pthread_once_t small_ints_once = PTHREAD_ONCE_INIT;

static void small_ints_fill(void) {
    for (int i = 0; i < JJ_SMALL_INTS; i++) small_ints[i] = (jjValue){.type = JV_INT, .u.i = i};
}

void jj_values_init(void) {
    pthread_once(&small_ints_once, small_ints_fill);
}

jjValue *jj_int(jjCtx *c, long long i) {
    if (i >= 0 && i < JJ_SMALL_INTS) return &small_ints[i];
    jjValue *v = value_new(c, JV_INT);
    if (v) v->u.i = i;
    return v;
}

jjValue *jj_float(jjCtx *c, double f) {
    jjValue *v = value_new(c, JV_FLOAT);
    if (v) v->u.f = f;
    return v;
}

jjValue *jj_str(jjCtx *c, const char *p, size_t len) {
    jjValue *v = value_new(c, JV_STR);
    char *s = v ? jj_ctx_alloc(c, len + 1) : NULL;
    if (!s) return NULL;
    if (len) memcpy(s, p, len);
    v->u.s.p = s;
    v->u.s.len = len;
    return v;
}

jjValue *jj_cstr(jjCtx *c, const char *s) {
    return jj_str(c, s, strlen(s));
}

jjValue *jj_list(jjCtx *c, size_t n, int tuple) {
    jjValue *v = value_new(c, JV_LIST);
    if (!v) return NULL;
    if (n > ((size_t)1 << 40) || !(v->u.l.v = jj_ctx_alloc(c, (n ? n : 1) * sizeof(jjValue *))))
        return n > ((size_t)1 << 40) ? jj_fail(c, "a list of %zu items is too long", n) : NULL;
    v->u.l.n = n;
    v->u.l.tuple = tuple;
    return v;
}

jjValue *jj_dict(jjCtx *c) {
    return value_new(c, JV_DICT);
}

jjValue *jj_dict_lookup(jjCtx *c, jjValue *d, jjValue *key) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (jj_equal(c, d->u.d.k[i], key)) return d->u.d.v[i];
    return NULL;
}

jjValue *jj_dict_get(jjValue *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jjValue *k = d->u.d.k[i];
        if (k->type == JV_STR && k->u.s.len == len && !memcmp(k->u.s.p, key, len)) return d->u.d.v[i];
    }
    return NULL;
}

int jj_dict_set(jjCtx *c, jjValue *d, jjValue *key, jjValue *v) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (jj_equal(c, d->u.d.k[i], key)) {
            d->u.d.v[i] = v;
            return 0;
        }
    if (jj_failed(c)) return -1;
    if (d->u.d.n == d->u.d.cap) {
        size_t cap = d->u.d.cap ? d->u.d.cap * 2 : 4;
        jjValue **k = jj_ctx_alloc(c, cap * sizeof(*k)), **vv = k ? jj_ctx_alloc(c, cap * sizeof(*vv)) : NULL;
        if (!vv) return -1;
        if (d->u.d.n) {
            memcpy(k, d->u.d.k, d->u.d.n * sizeof(*k));
            memcpy(vv, d->u.d.v, d->u.d.n * sizeof(*vv));
        }
        d->u.d.k = k;
        d->u.d.v = vv;
        d->u.d.cap = cap;
    }
    d->u.d.k[d->u.d.n] = key;
    d->u.d.v[d->u.d.n++] = v;
    return 0;
}

jjValue *jj_from_json(jjCtx *c, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_NULL: return jj_none();
    case JSON_TRUE: return jj_bool(1);
    case JSON_FALSE: return jj_bool(0);
    case JSON_INTEGER: return jj_int(c, json_integer_value(j));
    case JSON_REAL: return jj_float(c, json_real_value(j));
    case JSON_STRING: return jj_str(c, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jjValue *l = jj_list(c, json_array_size(j), 0);
        for (size_t i = 0; l && i < l->u.l.n; i++)
            if (!(l->u.l.v[i] = jj_from_json(c, json_array_get(j, i)))) return NULL;
        return l;
    }
    case JSON_OBJECT: {
        jjValue *d = jj_dict(c), *k, *v;
        const char *key;
        json_t *val;
        if (!d) return NULL;
        /* Keys are unique in a json_t, so no lookup is needed. */
        json_object_foreach((json_t *)j, key, val) {
            if (!(k = jj_cstr(c, key)) || !(v = jj_from_json(c, val))) return NULL;
            if (d->u.d.n == d->u.d.cap) {
                size_t cap = d->u.d.cap ? d->u.d.cap * 2 : 4;
                jjValue **kk = jj_ctx_alloc(c, cap * sizeof(*kk)), **vv = kk ? jj_ctx_alloc(c, cap * sizeof(*vv)) : NULL;
                if (!vv) return NULL;
                if (d->u.d.n) {
                    memcpy(kk, d->u.d.k, d->u.d.n * sizeof(*kk));
                    memcpy(vv, d->u.d.v, d->u.d.n * sizeof(*vv));
                }
                d->u.d.k = kk, d->u.d.v = vv, d->u.d.cap = cap;
            }
            d->u.d.k[d->u.d.n] = k;
            d->u.d.v[d->u.d.n++] = v;
        }
        return d;
    }
    }
    return jj_fail(c, "unexpected JSON value");
}

/* ---- Python semantics ---- */

int jj_truthy(const jjValue *v) {
    switch (v->type) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s.len > 0;
    case JV_LIST: return v->u.l.n > 0;
    case JV_DICT: return v->u.d.n > 0;
    default: return 1;
    }
}

int jj_is_number(const jjValue *v) {
    return v->type == JV_BOOL || v->type == JV_INT || v->type == JV_FLOAT;
}

double jj_as_double(const jjValue *v) {
    return v->type == JV_FLOAT ? v->u.f : v->type == JV_INT ? (double)v->u.i : (double)v->u.b;
}

/* Deepest value printed, compared or dumped (Python's recursion limit is
 * about 1,000; real templates stay under 10). */
#define JJ_MAX_NEST 200

static long long as_int(const jjValue *v) {
    return v->type == JV_INT ? v->u.i : v->u.b;
}

/* One more value compared, printed or dumped (`what`): a step, a level no
 * deeper than JJ_MAX_NEST, and the text written so far (b, or NULL) within
 * the memory still free.  So values that share parts (a list holding one
 * list twice, doubled 40 times: 2^40 items to visit) or nest 100,000 deep
 * stop with an error instead of running for hours, eating the host's
 * memory or overflowing the stack. */
static int visit(jjCtx *c, int level, const char *what, const bytebuf *b) {
    if (jj_failed(c)) return -1;
    if (level > JJ_MAX_NEST) {
        jj_fail(c, "a value nested more than %d levels deep cannot be %s", JJ_MAX_NEST, what);
        return -1;
    }
    if (++c->steps > c->lim->max_steps) {
        jj_fail(c, "the template ran more than %lld steps; it is stopped so it cannot hold up the worker",
                c->lim->max_steps);
        return -1;
    }
    return b ? jj_room(c, b->len) : 0;
}

/* Python's containers compare an item that is the same object as equal
 * without looking inside. */
static int equal_at(jjCtx *c, const jjValue *a, const jjValue *b, int level) {
    if (visit(c, level, "compared", NULL)) return 0;
    if (jj_is_number(a) && jj_is_number(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) return as_int(a) == as_int(b);
        return jj_as_double(a) == jj_as_double(b);
    }
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a->u.s.len == b->u.s.len && !memcmp(a->u.s.p, b->u.s.p, a->u.s.len);
    case JV_LIST:
        if (a->u.l.tuple != b->u.l.tuple || a->u.l.n != b->u.l.n) return 0;
        for (size_t i = 0; i < a->u.l.n; i++)
            if (a->u.l.v[i] != b->u.l.v[i] && !equal_at(c, a->u.l.v[i], b->u.l.v[i], level + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a->u.d.n != b->u.d.n) return 0;
        for (size_t i = 0; i < a->u.d.n; i++) {
            jjValue *o = jj_dict_lookup(c, (jjValue *)b, a->u.d.k[i]);
            if (!o || (a->u.d.v[i] != o && !equal_at(c, a->u.d.v[i], o, level + 1))) return 0;
        }
        return 1;
    case JV_FUNC: return a->u.fn.fn == b->u.fn.fn && a->u.fn.self == b->u.fn.self;
    default: return a == b;
    }
}

int jj_equal(jjCtx *c, const jjValue *a, const jjValue *b) {
    return equal_at(c, a, b, 0);
}

static int compare_at(jjCtx *c, const jjValue *a, const jjValue *b, int *ok, int level) {
    *ok = 1;
    if (visit(c, level, "compared", NULL)) return 0;
    if (jj_is_number(a) && jj_is_number(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) return (as_int(a) > as_int(b)) - (as_int(a) < as_int(b));
        double x = jj_as_double(a), y = jj_as_double(b);
        return (x > y) - (x < y);
    }
    if (a->type == JV_STR && b->type == JV_STR) {
        size_t n = a->u.s.len < b->u.s.len ? a->u.s.len : b->u.s.len;
        int r = memcmp(a->u.s.p, b->u.s.p, n);   /* UTF-8 byte order is code point order */
        if (r) return r;
        return (a->u.s.len > b->u.s.len) - (a->u.s.len < b->u.s.len);
    }
    if (a->type == JV_LIST && b->type == JV_LIST && a->u.l.tuple == b->u.l.tuple) {
        for (size_t i = 0; i < a->u.l.n && i < b->u.l.n; i++) {
            if (a->u.l.v[i] == b->u.l.v[i] || equal_at(c, a->u.l.v[i], b->u.l.v[i], level + 1)) continue;
            return jj_failed(c) ? 0 : compare_at(c, a->u.l.v[i], b->u.l.v[i], ok, level + 1);
        }
        return (a->u.l.n > b->u.l.n) - (a->u.l.n < b->u.l.n);
    }
    *ok = 0;
    return 0;
}

int jj_compare(jjCtx *c, const jjValue *a, const jjValue *b, int *ok) {
    return compare_at(c, a, b, ok, 0);
}

const char *jj_type_name(const jjValue *v) {
    switch (v->type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->u.l.tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    }
    return "object";
}

/* ---- UTF-8 by code point ---- */

size_t jj_utf8_decode(const char *p, size_t n, int32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {   /* never for the validated text we hold; stay safe anyway */
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

size_t jj_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t jj_utf8_offset(const char *p, size_t n, size_t k) {
    size_t i = 0;
    for (; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80 && k-- == 0) return i;
    return n;
}

int jj_isspace(int32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- str(), repr(), json.dumps ---- */

void jj_write_float(bytebuf *b, double f) {
    if (isnan(f)) {
        bytebuf_append(b, "nan", 3);
        return;
    }
    if (isinf(f)) {
        bytebuf_append(b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3);
        return;
    }
    /* The shortest digits that read back as f, placed as Python's repr
     * places them: positional from 1e-4 up to 1e16, else d.ddde+XX. */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof(e), "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *s = e + neg;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof(out) - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    bytebuf_append(b, out, (size_t)o);
}

static int is_printable(int32_t cp) {
    if (cp < 0x7F) return cp >= 0x20;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

/* Python's repr(str). */
static int write_str_repr(bytebuf *b, const char *p, size_t n) {
    char q = memchr(p, '\'', n) && !memchr(p, '"', n) ? '"' : '\'';
    int bad = bytebuf_putc(b, q);
    for (size_t i = 0; i < n && !bad;) {
        int32_t cp;
        size_t k = jj_utf8_decode(p + i, n - i, &cp);
        char esc[16];
        if (cp == q || cp == '\\') {
            esc[0] = '\\', esc[1] = (char)cp;
            bad = bytebuf_append(b, esc, 2);
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            esc[0] = '\\', esc[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
            bad = bytebuf_append(b, esc, 2);
        } else if (is_printable(cp)) {
            bad = bytebuf_append(b, p + i, k);
        } else {
            int w = snprintf(esc, sizeof(esc), cp <= 0xFF ? "\\x%02x" : cp <= 0xFFFF ? "\\u%04x" : "\\U%08x",
                             (unsigned)cp);
            bad = bytebuf_append(b, esc, (size_t)w);
        }
        i += k;
    }
    return bad || bytebuf_putc(b, q);
}

static int write_value(jjCtx *c, bytebuf *b, const jjValue *v, int repr, int level);

static int write_items(jjCtx *c, bytebuf *b, const jjValue *v, int level) {
    int bad = 0;
    if (v->type == JV_LIST) {
        bad = bytebuf_putc(b, v->u.l.tuple ? '(' : '[');
        for (size_t i = 0; i < v->u.l.n && !bad; i++)
            bad = (i && bytebuf_append(b, ", ", 2)) || write_value(c, b, v->u.l.v[i], 1, level + 1);
        if (!bad && v->u.l.tuple && v->u.l.n == 1) bad = bytebuf_putc(b, ',');
        return bad || bytebuf_putc(b, v->u.l.tuple ? ')' : ']');
    }
    bad = bytebuf_putc(b, '{');
    for (size_t i = 0; i < v->u.d.n && !bad; i++)
        bad = (i && bytebuf_append(b, ", ", 2)) || write_value(c, b, v->u.d.k[i], 1, level + 1) ||
              bytebuf_append(b, ": ", 2) || write_value(c, b, v->u.d.v[i], 1, level + 1);
    return bad || bytebuf_putc(b, '}');
}

static int write_value(jjCtx *c, bytebuf *b, const jjValue *v, int repr, int level) {
    char num[64];
    if (visit(c, level, "printed", b)) return -1;
    int bad = 0;
    switch (v->type) {
    case JV_UNDEF: bad = repr ? bytebuf_append(b, "Undefined", 9) : 0; break;
    case JV_NONE: bad = bytebuf_append(b, "None", 4); break;
    case JV_BOOL: bad = v->u.b ? bytebuf_append(b, "True", 4) : bytebuf_append(b, "False", 5); break;
    case JV_INT: bad = bytebuf_append(b, num, (size_t)snprintf(num, sizeof(num), "%lld", v->u.i)); break;
    case JV_FLOAT: jj_write_float(b, v->u.f); break;
    case JV_STR: bad = repr ? write_str_repr(b, v->u.s.p, v->u.s.len) : bytebuf_append(b, v->u.s.p, v->u.s.len); break;
    case JV_LIST: case JV_DICT: bad = write_items(c, b, v, level); break;
    case JV_NS:
        bad = bytebuf_append(b, "<Namespace ", 11) || write_items(c, b, &(jjValue){.type = JV_DICT, .u.d = v->u.d}, level) ||
              bytebuf_putc(b, '>');
        break;
    case JV_LOOP:
        bad = bytebuf_append(b, num, (size_t)snprintf(num, sizeof(num), "<LoopContext %zu/%zu>", v->u.loop->i + 1,
                                                      v->u.loop->n));
        break;
    case JV_FUNC:
        /* Python prints a memory address here: no rendering can match it. */
        jj_fail(c, "'%s' is a function; printing it is not supported", v->u.fn.fn->name);
        return -1;
    case JV_MACRO:
        bad = bytebuf_append(b, "<Macro '", 8) || bytebuf_append(b, v->u.macro->name, strlen(v->u.macro->name)) ||
              bytebuf_append(b, "'>", 2);
        break;
    }
    if (bad && !jj_failed(c)) jj_fail(c, "out of memory");
    return bad ? -1 : 0;
}

int jj_write_str(jjCtx *c, bytebuf *b, const jjValue *v) {
    return write_value(c, b, v, 0, 0);
}

jjValue *jj_to_str(jjCtx *c, const jjValue *v) {
    if (v->type == JV_STR) return (jjValue *)v;
    bytebuf b = {0};
    if (jj_write_str(c, &b, v)) {
        bytebuf_free(&b);
        return NULL;
    }
    jjValue *s = jj_str(c, b.data ? b.data : "", b.len);
    bytebuf_free(&b);
    return s;
}

static int write_json_str(bytebuf *b, const char *p, size_t n, int ensure_ascii) {
    int bad = bytebuf_putc(b, '"');
    for (size_t i = 0; i < n && !bad;) {
        int32_t cp;
        size_t k = jj_utf8_decode(p + i, n - i, &cp);
        char esc[16];
        int w = 0;
        switch (cp) {
        case '"': w = snprintf(esc, sizeof(esc), "\\\""); break;
        case '\\': w = snprintf(esc, sizeof(esc), "\\\\"); break;
        case '\n': w = snprintf(esc, sizeof(esc), "\\n"); break;
        case '\r': w = snprintf(esc, sizeof(esc), "\\r"); break;
        case '\t': w = snprintf(esc, sizeof(esc), "\\t"); break;
        case '\b': w = snprintf(esc, sizeof(esc), "\\b"); break;
        case '\f': w = snprintf(esc, sizeof(esc), "\\f"); break;
        default:
            if (cp < 0x20 || (ensure_ascii && cp > 0x7E && cp != 0x7F)) {
                if (cp > 0xFFFF) {
                    int32_t v = cp - 0x10000;
                    w = snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    w = snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
                }
            }
        }
        bad = w ? bytebuf_append(b, esc, (size_t)w) : bytebuf_append(b, p + i, k);
        i += k;
    }
    return bad || bytebuf_putc(b, '"');
}

static int json_newline(bytebuf *b, const char *indent, int level) {
    if (bytebuf_putc(b, '\n')) return -1;
    for (int i = 0; i < level; i++)
        if (bytebuf_append(b, indent, strlen(indent))) return -1;
    return 0;
}

/* A dict key as json.dumps writes it (keys may be str, int, float, bool, None). */
static int json_key(jjCtx *c, bytebuf *b, const jjValue *k, int ensure_ascii) {
    if (k->type == JV_STR) return write_json_str(b, k->u.s.p, k->u.s.len, ensure_ascii);
    bytebuf t = {0};
    int bad = 0;
    if (k->type == JV_NONE) bad = bytebuf_append(&t, "null", 4);
    else if (k->type == JV_BOOL) bad = bytebuf_append(&t, k->u.b ? "true" : "false", k->u.b ? 4 : 5);
    else if (k->type == JV_INT || k->type == JV_FLOAT) bad = jj_write_str(c, &t, k);
    else {
        jj_fail(c, "tojson: keys must be str, int, float, bool or None, not %s", jj_type_name(k));
        return -1;
    }
    bad = bad || write_json_str(b, t.data ? t.data : "", t.len, ensure_ascii);
    bytebuf_free(&t);
    return bad;
}

static int key_order(const void *x, const void *y, void *c) {
    const jjValue *a = **(jjValue *const *const *)x, *b = **(jjValue *const *const *)y;
    int ok;
    return jj_compare(c, a, b, &ok);
}

int jj_write_json(jjCtx *c, bytebuf *b, const jjValue *v, int ensure_ascii, const char *indent,
                  const char *item_sep, const char *key_sep, int sort_keys, int level) {
    if (visit(c, level, "dumped by tojson", b)) return -1;
    int bad = 0;
    char num[32];
    switch (v->type) {
    case JV_NONE: bad = bytebuf_append(b, "null", 4); break;
    case JV_BOOL: bad = bytebuf_append(b, v->u.b ? "true" : "false", v->u.b ? 4 : 5); break;
    case JV_INT: bad = bytebuf_append(b, num, (size_t)snprintf(num, sizeof(num), "%lld", v->u.i)); break;
    case JV_FLOAT:
        if (isnan(v->u.f)) bad = bytebuf_append(b, "NaN", 3);
        else if (isinf(v->u.f)) bad = v->u.f > 0 ? bytebuf_append(b, "Infinity", 8) : bytebuf_append(b, "-Infinity", 9);
        else jj_write_float(b, v->u.f);
        break;
    case JV_STR: bad = write_json_str(b, v->u.s.p, v->u.s.len, ensure_ascii); break;
    case JV_LIST:
        if (!v->u.l.n) {
            bad = bytebuf_append(b, "[]", 2);
            break;
        }
        bad = bytebuf_putc(b, '[');
        for (size_t i = 0; i < v->u.l.n && !bad; i++) {
            if (i) bad = bytebuf_append(b, item_sep, strlen(item_sep));
            if (!bad && indent) bad = json_newline(b, indent, level + 1);
            if (!bad) bad = jj_write_json(c, b, v->u.l.v[i], ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1);
        }
        if (!bad && indent) bad = json_newline(b, indent, level);
        if (!bad) bad = bytebuf_putc(b, ']');
        break;
    case JV_DICT: {
        if (!v->u.d.n) {
            bad = bytebuf_append(b, "{}", 2);
            break;
        }
        size_t n = v->u.d.n;
        jjValue ***order = malloc(n * sizeof(*order));
        if (!order) {
            bad = 1;
            break;
        }
        for (size_t i = 0; i < n; i++) order[i] = &v->u.d.k[i];
        if (sort_keys) {
            for (size_t i = 1; i < n; i++) {
                int ok;
                jj_compare(c, v->u.d.k[0], v->u.d.k[i], &ok);
                if (!ok) {
                    free(order);
                    jj_fail(c, "tojson(sort_keys=true): keys of different types cannot be sorted");
                    return -1;
                }
            }
            qsort_r(order, n, sizeof(*order), key_order, c);
        }
        bad = bytebuf_putc(b, '{');
        for (size_t i = 0; i < n && !bad; i++) {
            size_t at = (size_t)(order[i] - v->u.d.k);
            if (i) bad = bytebuf_append(b, item_sep, strlen(item_sep));
            if (!bad && indent) bad = json_newline(b, indent, level + 1);
            bad = bad || json_key(c, b, v->u.d.k[at], ensure_ascii) || bytebuf_append(b, key_sep, strlen(key_sep)) ||
                  jj_write_json(c, b, v->u.d.v[at], ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1);
        }
        free(order);
        if (!bad && indent) bad = json_newline(b, indent, level);
        if (!bad) bad = bytebuf_putc(b, '}');
        break;
    }
    default:
        jj_fail(c, "tojson: Object of type %s is not JSON serializable", jj_type_name(v));
        return -1;
    }
    if (bad && !jj_failed(c)) jj_fail(c, "out of memory");
    return bad ? -1 : 0;
}
