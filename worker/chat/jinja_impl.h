/* jinja_impl.h: what the interpreter's files share (values, tokens, the
 * syntax tree, the render context).  Not for use outside worker/chat/.
 *
 * Values are immutable and live in an arena: a render allocates from its
 * own arena and frees it whole at the end, so no value is ever freed alone
 * and the arena's size is the render's memory bound.  Only a namespace()
 * changes after it is made (attribute assignment), as in Jinja. */
#ifndef RL_JINJA_IMPL_H
#define RL_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/error.h"
#include "worker/chat/jinja.h"
#include "worker/lib/bytebuf.h"

/* ---- arena ---- */

typedef struct jjChunk jjChunk;
typedef struct jjArena {
    jjChunk *head;
    size_t used, limit;     /* limit 0: none */
} jjArena;

/* n zeroed bytes; NULL when the limit is reached or memory is out. */
void *jj_alloc(jjArena *a, size_t n);
void jj_arena_free(jjArena *a);

/* ---- values ---- */

typedef enum jjType {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS,
    JV_LOOP, JV_FUNC, JV_MACRO
} jjType;

typedef struct jjValue jjValue;
typedef struct jjCtx jjCtx;
typedef struct jjNode jjNode;
typedef struct jjArgs jjArgs;

typedef jjValue *(*jjFn)(jjCtx *c, jjValue *self, jjArgs *a);

/* A filter, test, global function or method: one table per kind. */
typedef struct jjBuiltin {
    const char *name;
    jjFn fn;
} jjBuiltin;

typedef struct jjLoop {
    jjValue **items;
    size_t n, i;
} jjLoop;

struct jjValue {
    jjType type;
    union {
        int b;
        long long i;
        double f;
        struct { const char *p; size_t len; } s;                /* UTF-8, not NUL-terminated */
        struct { jjValue **v; size_t n; int tuple; } l;
        struct { jjValue **k, **v; size_t n, cap; } d;          /* JV_DICT, JV_NS */
        struct { const jjBuiltin *fn; jjValue *self; } fn;      /* self NULL: a global */
        const jjNode *macro;
        jjLoop *loop;
        const char *undef;                                      /* why (for errors) */
    } u;
};

struct jjArgs {
    jjValue **pos;
    int n_pos;
    const char **kw_names;
    jjValue **kw;
    int n_kw;
};

/* ---- render context ---- */

/* One scope's variables.  Names point at the template's own strings (or
 * the render's copies of the globals' names), so binding allocates nothing
 * but room, and a loop reuses its frame from one iteration to the next. */
typedef struct jjFrame {
    struct jjFrame *parent;
    const char **names;
    jjValue **vals;
    size_t n, cap;
} jjFrame;

struct jjCtx {
    jjArena arena;
    const jjLimits *lim;
    rlError *err;
    long long steps;
    size_t out_total;
    bytebuf *out;
    int depth;
    jjFrame *root, *frame;
    const struct jjTemplate *t;
    int line;                   /* of the statement running, for messages */
};

/* Every failure goes through here: fills c->err once, returns NULL. */
jjValue *jj_fail(jjCtx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int jj_failed(const jjCtx *c);

/* n zeroed bytes of the render's arena; NULL (and the error set) past
 * the memory limit. */
void *jj_ctx_alloc(jjCtx *c, size_t n);

/* 0 when n bytes of text being built (outside the arena, in a bytebuf)
 * fit in the memory the render has left; else the memory error, so a
 * builder cannot grow its buffer past the bound before copying it in. */
int jj_room(jjCtx *c, size_t n);

/* Undefined, with why it is (Jinja's hint, e.g. "'dict object' has no
 * attribute 'x'"), for the error raised when it is used. */
jjValue *jj_undef(jjCtx *c, const char *why);
jjValue *jj_undeff(jjCtx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jjValue *jj_fail_undef(jjCtx *c, const jjValue *u);
jjValue *jj_none(void);
jjValue *jj_bool(int b);
void jj_values_init(void);    /* once per process, before the first render */
jjValue *jj_int(jjCtx *c, long long i);
jjValue *jj_float(jjCtx *c, double f);
jjValue *jj_str(jjCtx *c, const char *p, size_t len);     /* copies */
jjValue *jj_cstr(jjCtx *c, const char *s);
jjValue *jj_list(jjCtx *c, size_t n, int tuple);          /* n NULL slots to fill */
jjValue *jj_dict(jjCtx *c);
int jj_dict_set(jjCtx *c, jjValue *d, jjValue *key, jjValue *v);
jjValue *jj_dict_get(jjValue *d, const char *key, size_t len);
jjValue *jj_dict_lookup(jjCtx *c, jjValue *d, jjValue *key);   /* NULL when absent */
jjValue *jj_from_json(jjCtx *c, const struct json_t *j);

int jj_truthy(const jjValue *v);
/* Python's ==.  Each value looked at is a step; past the step limit or
 * nesting too deep, c's error is set and the answer is 0. */
int jj_equal(jjCtx *c, const jjValue *a, const jjValue *b);
/* <0, 0, >0; sets *ok 0 when Python would raise TypeError.  Bounded as jj_equal. */
int jj_compare(jjCtx *c, const jjValue *a, const jjValue *b, int *ok);
const char *jj_type_name(const jjValue *v);              /* Python's names */
int jj_is_number(const jjValue *v);                       /* bool, int, float */
double jj_as_double(const jjValue *v);

/* str(v) appended to b (Python's str; undefined is ""). -1: out of memory
 * or nesting too deep (c's error set). */
int jj_write_str(jjCtx *c, bytebuf *b, const jjValue *v);
jjValue *jj_to_str(jjCtx *c, const jjValue *v);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) as
 * transformers' tojson calls it; indent NULL: none. */
int jj_write_json(jjCtx *c, bytebuf *b, const jjValue *v, int ensure_ascii, const char *indent,
                  const char *item_sep, const char *key_sep, int sort_keys, int level);
void jj_write_float(bytebuf *b, double f);                /* Python's repr(float) */

/* ---- strings by code point, as Python indexes them ---- */

size_t jj_utf8_len(const char *p, size_t n);              /* code points */
size_t jj_utf8_decode(const char *p, size_t n, int32_t *cp);   /* bytes used (valid input) */
size_t jj_utf8_offset(const char *p, size_t n, size_t k); /* byte offset of code point k */
int jj_isspace(int32_t cp);                               /* Python's str.isspace */

/* ---- builtins (jinja_builtins.c, jinja_filters.c, jinja_methods.c) ---- */

const jjBuiltin *jj_find_builtin(const jjBuiltin *table, const char *name);   /* NULL-terminated */

const jjBuiltin *jj_find_filter(const char *name);
const jjBuiltin *jj_find_test(const char *name);
const jjBuiltin *jj_find_global(const char *name);
/* The method `name` of a value of v's type, or NULL. */
const jjBuiltin *jj_find_method(const jjValue *v, const char *name);
int jj_method_exists(const char *name);                   /* of any type, for the load check */
/* Dict keys that Python's getattr finds as a method before the key. */
int jj_dict_attr_is_method(const char *name);
jjValue *jj_call(jjCtx *c, jjValue *fn, jjArgs *a);       /* JV_FUNC or JV_MACRO */
jjValue *jj_run_test(jjCtx *c, const jjBuiltin *test, jjValue *v, jjArgs *a);

/* Bind a call's arguments to parameter names: out[i] is the value given
 * for names[i] (positionally or by keyword) or NULL.  Unknown keywords and
 * extra positionals are errors naming `what`. */
int jj_bind(jjCtx *c, const char *what, jjArgs *a, const char *const *names, int n, jjValue **out);
/* In a builtin with parameters (c, ..., a): arg[i] is the value of the i-th name or NULL. */
#define BIND(what, ...)                                                                 \
    static const char *const names_[] = {__VA_ARGS__};                                  \
    enum { N_ = sizeof(names_) / sizeof(names_[0]) };                                   \
    jjValue *arg[N_];                                                                   \
    if (jj_bind(c, what, a, names_, N_, arg)) return NULL
/* Argument checks naming `what` in the error. */
int jj_no_args(jjCtx *c, const char *what, jjArgs *a);
jjValue *jj_want_str(jjCtx *c, const char *what, jjValue *v);
int jj_want_int(jjCtx *c, const char *what, jjValue *v, long long *out);
/* A string value of b's bytes (bad: an append failed: out of memory); frees b. */
jjValue *jj_from_buf(jjCtx *c, bytebuf *b, int bad);

/* Strings by code point (jinja_methods.c), shared by methods and filters. */
typedef int32_t (*jjCaseFn)(int32_t);
int32_t jj_lower_cp(int32_t cp);
int32_t jj_upper_cp(int32_t cp);
int32_t jj_title_cp(int32_t cp);
/* mode 0: every character through f; 1: str.title(); 2: str.capitalize(). */
jjValue *jj_str_case(jjCtx *c, jjValue *s, jjCaseFn f, int mode);
/* chars: the code points to strip (a string), NULL: whitespace. */
jjValue *jj_str_strip(jjCtx *c, jjValue *s, const jjValue *chars, int left, int right);
jjValue *jj_str_replace(jjCtx *c, jjValue *s, jjValue *old, jjValue *new_, long long count);
jjValue *jj_str_splitlines(jjCtx *c, jjValue *s, int keepends);
/* sep.join(items): strict, only strings (str.join); else any value as a string (| join). */
jjValue *jj_join_items(jjCtx *c, jjValue *items, const char *sep, size_t sep_len, int strict);
/* A dict's keys (which 0), values (1) or (key, value) items (2), as a list. */
jjValue *jj_dict_view(jjCtx *c, jjValue *self, int which);

/* Python's operators, shared by the evaluator and the filters. */
jjValue *jj_binop(jjCtx *c, const char *op, jjValue *a, jjValue *b);
jjValue *jj_getattr(jjCtx *c, jjValue *obj, const char *name);
jjValue *jj_getitem(jjCtx *c, jjValue *obj, jjValue *key);
int jj_contains(jjCtx *c, jjValue *container, jjValue *item);  /* -1: error */
/* The items of an iterable (str: characters, dict: keys); NULL + error otherwise. */
jjValue *jj_iterate(jjCtx *c, jjValue *v);

/* ---- tokens and syntax tree (jinja_lex.c, jinja_parse.c) ---- */

typedef enum jjTok {
    TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP, TK_EOF
} jjTok;

typedef struct jjToken {
    jjTok type;
    const char *s;              /* text, name, decoded string, operator */
    size_t len;
    long long i;
    double f;
    int line;
} jjToken;

typedef struct jjTokens {
    jjToken *v;
    size_t n, cap;
} jjTokens;

/* Split a template into tokens, whitespace control applied as transformers
 * configures Jinja (trim_blocks, lstrip_blocks; one trailing newline of the
 * source dropped).  Strings and text live in arena. */
int jj_lex(const char *src, size_t len, jjArena *arena, jjTokens *out, rlError *err);

typedef enum jjKind {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL,
    N_FILTER, N_TEST, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_BINOP, N_COMPARE, N_COND,
    /* statements */
    S_TEXT, S_PRINT, S_IF, S_FOR, S_SET, S_SET_BLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_BLOCK
} jjKind;

struct jjNode {
    jjKind kind;
    int line;
    jjNode *a, *b, *c;          /* operands; S_FOR: a target, b iterable, c filter */
    jjNode **list;              /* arguments, items, dict keys, body */
    int n;
    jjNode **list2;             /* keyword values, dict values, else body, defaults */
    int n2;
    const char **names;         /* keyword names, macro parameters */
    const char *name;           /* identifier, attribute, filter/test name, operator */
    const jjBuiltin *fn;        /* resolved filter or test */
    jjValue *value;             /* N_CONST */
    int negate;                 /* N_TEST: `is not` */
};

struct jjTemplate {
    jjArena arena;
    jjNode **body;
    int n;
    char *name;
};

/* tokens -> t->body; refuses what the interpreter lacks, by name. */
int jj_parse(jjTemplate *t, const jjTokens *toks, rlError *err);

#endif
