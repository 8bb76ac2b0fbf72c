/* jinja_lex.c: a template's text split into tokens, with the whitespace
 * rules of the Jinja environment transformers renders chat templates in
 * (trim_blocks, lstrip_blocks, `-`/`+` on tags, one trailing newline of the
 * source dropped).  Those rules decide every newline of a prompt, so they
 * follow Jinja's lexer (jinja2/lexer.py) case by case. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja_impl.h"

typedef struct jjLexer {
    const char *s;
    size_t n, pos;
    int line;
    int line_starting;          /* the last tag consumed ended with a newline */
    jjArena *arena;
    jjTokens *out;
    rlError *err;
} jjLexer;

static int lex_fail(jjLexer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lex_fail(jjLexer *l, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return rl_error(l->err, RL_EINPUT, "line %d: %s", l->line, msg);
}

static jjToken *push(jjLexer *l, jjTok type, const char *s, size_t len) {
    jjTokens *t = l->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        jjToken *v = realloc(t->v, cap * sizeof(*v));
        if (!v) {
            rl_error(l->err, RL_EMEMORY, "out of memory");
            return NULL;
        }
        t->v = v;
        t->cap = cap;
    }
    jjToken *k = &t->v[t->n++];
    memset(k, 0, sizeof(*k));
    k->type = type;
    k->s = s;
    k->len = len;
    k->line = l->line;
    return k;
}

static void count_lines(jjLexer *l, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) l->line += l->s[i] == '\n';
}

/* Length of the Python-whitespace character at p, or 0. */
static size_t space_at(const char *p, size_t n) {
    if (!n) return 0;
    int32_t cp;
    size_t k = jj_utf8_decode(p, n, &cp);
    return jj_isspace(cp) ? k : 0;
}

/* Where Python's text.rstrip() would end text[0..n). */
static size_t rstrip_end(const char *p, size_t n) {
    while (n > 0) {
        size_t k = 1;
        while (k < n && k < 4 && ((unsigned char)p[n - k] & 0xC0) == 0x80) k++;
        if (space_at(p + n - k, k) != k) break;
        n -= k;
    }
    return n;
}

static int only_space(const char *p, size_t n) {
    size_t i = 0, k;
    while (i < n && (k = space_at(p + i, n - i))) i += k;
    return n > 0 && i == n;
}

/* The text before a tag, with the tag's left-side whitespace rule. */
static int emit_text(jjLexer *l, size_t from, size_t to, char sign, int is_var) {
    const char *p = l->s + from;
    size_t n = to - from;
    if (sign == '-') {
        n = rstrip_end(p, n);
    } else if (sign != '+' && !is_var) {
        size_t lpos = 0;
        for (size_t i = n; i > 0; i--)
            if (p[i - 1] == '\n') {
                lpos = i;
                break;
            }
        if ((lpos > 0 || l->line_starting) && only_space(p + lpos, n - lpos)) n = lpos;
    }
    int line = l->line;
    count_lines(l, from, to);
    if (!n) return 0;
    jjToken *t = push(l, TK_TEXT, p, n);
    if (!t) return -1;
    t->line = line;
    return 0;
}

/* Skip the whitespace after a closing tag, as its marker asks: '-' all of
 * it, trim (trim_blocks) one newline. */
static void after_close(jjLexer *l, char sign, int trim) {
    size_t start = l->pos, k;
    if (sign == '-') {
        while ((k = space_at(l->s + l->pos, l->n - l->pos))) l->pos += k;
    } else if (sign != '+' && trim && l->pos < l->n && l->s[l->pos] == '\n') {
        l->pos++;
    }
    count_lines(l, start, l->pos);
    l->line_starting = l->pos > 0 && l->s[l->pos - 1] == '\n' && l->pos > start;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A quoted string literal at l->pos, decoded as Python's unicode-escape
 * (what Jinja does with a literal's body). */
static int lex_string(jjLexer *l) {
    char q = l->s[l->pos];
    size_t i = l->pos + 1;
    while (i < l->n && l->s[i] != q) i += l->s[i] == '\\' && i + 1 < l->n ? 2 : 1;
    if (i >= l->n) return lex_fail(l, "a string literal is not closed");
    const char *p = l->s + l->pos + 1;
    size_t n = i - l->pos - 1, o = 0;
    char *buf = jj_alloc(l->arena, n + 1);
    if (!buf) return rl_error(l->err, RL_EMEMORY, "out of memory");
    for (size_t k = 0; k < n;) {
        if (p[k] != '\\' || k + 1 >= n) {
            buf[o++] = p[k++];
            continue;
        }
        char e = p[k + 1];
        const char *simple = strchr("\\'\"abfnrtv", e);
        if (e && simple) {
            buf[o++] = "\\'\"\a\b\f\n\r\t\v"[simple - "\\'\"abfnrtv"];
            k += 2;
        } else if (e == '\n') {
            k += 2;
        } else if (e >= '0' && e <= '7') {
            unsigned v = 0;
            size_t d = 1;
            for (; d <= 3 && k + d < n && p[k + d] >= '0' && p[k + d] <= '7'; d++) v = v * 8 + (unsigned)(p[k + d] - '0');
            o += put_utf8(buf + o, v);
            k += d;
        } else if (e == 'x' || e == 'u' || e == 'U') {
            size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (size_t d = 0; d < digits; d++) {
                int h = k + 2 + d < n ? hexval(p[k + 2 + d]) : -1;
                if (h < 0) return lex_fail(l, "truncated \\%c escape in a string literal", e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return lex_fail(l, "\\%c escape of U+%X is not a character", e, v);
            o += put_utf8(buf + o, v);
            k += 2 + digits;
        } else if (e == 'N') {
            return lex_fail(l, "\\N{...} escapes in string literals are not supported");
        } else {
            buf[o++] = p[k++];   /* an unknown escape keeps its backslash */
        }
    }
    jjToken *t = push(l, TK_STRING, buf, o);
    if (!t) return -1;
    count_lines(l, l->pos, i + 1);
    l->pos = i + 1;
    return 0;
}

static int lex_number(jjLexer *l) {
    const char *p = l->s + l->pos;
    size_t n = l->n - l->pos, i = 0;
    char buf[128];
    size_t o = 0;
    int is_float = 0;
    while (i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '_') && o < sizeof(buf) - 8)
        if (p[i++] != '_') buf[o++] = p[i - 1];
    if (i + 1 < n && p[i] == '.' && p[i + 1] >= '0' && p[i + 1] <= '9') {
        is_float = 1;
        buf[o++] = p[i++];
        while (i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '_') && o < sizeof(buf) - 8)
            if (p[i++] != '_') buf[o++] = p[i - 1];
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (p[j] == '+' || p[j] == '-')) j++;
        if (j < n && p[j] >= '0' && p[j] <= '9') {
            is_float = 1;
            buf[o++] = 'e';
            if (p[i + 1] == '-' || p[i + 1] == '+') buf[o++] = p[i + 1];
            for (i = j; i < n && p[i] >= '0' && p[i] <= '9' && o < sizeof(buf) - 1; i++) buf[o++] = p[i];
        }
    }
    buf[o] = 0;
    jjToken *t = push(l, is_float ? TK_FLOAT : TK_INT, p, i);
    if (!t) return -1;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        errno = 0;
        t->i = strtoll(buf, NULL, 10);
        if (errno) return lex_fail(l, "the integer %s is too large", buf);
    }
    l->pos += i;
    return 0;
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                  ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", NULL};

/* Tokens of one {{ }} or {% %} tag, up to and including its closer. */
static int lex_tag(jjLexer *l, int is_var) {
    int depth = 0;
    for (;;) {
        size_t k;
        while ((k = space_at(l->s + l->pos, l->n - l->pos))) {
            l->line += l->s[l->pos] == '\n';
            l->pos += k;
        }
        const char *p = l->s + l->pos;
        size_t n = l->n - l->pos;
        if (!n) return lex_fail(l, "a %s tag is not closed", is_var ? "{{" : "{%");
        if (depth == 0) {
            const char *close = is_var ? "}}" : "%}";
            char sign = (p[0] == '-' || (p[0] == '+' && !is_var)) ? p[0] : 0;
            if (n >= 2u + (sign != 0) && !memcmp(p + (sign != 0), close, 2)) {
                if (!push(l, is_var ? TK_VAR_END : TK_BLOCK_END, p, 2)) return -1;
                l->pos += 2 + (sign != 0);
                after_close(l, sign, !is_var);
                return 0;
            }
        }
        unsigned char c = (unsigned char)p[0];
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t i = 1;
            while (i < n && (p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
                             (p[i] >= '0' && p[i] <= '9')))
                i++;
            if (!push(l, TK_NAME, p, i)) return -1;
            l->pos += i;
        } else if (c >= '0' && c <= '9') {
            if (lex_number(l)) return -1;
        } else if (c == '\'' || c == '"') {
            if (lex_string(l)) return -1;
        } else {
            const char *const *op = OPS;
            for (; *op; op++)
                if (n >= strlen(*op) && !memcmp(p, *op, strlen(*op))) break;
            if (!*op) return lex_fail(l, "unexpected character '%c' in a tag", c >= 0x20 && c < 0x7F ? c : '?');
            if (strchr("([{", c)) depth++;
            if (strchr(")]}", c) && --depth < 0) return lex_fail(l, "unbalanced '%c'", c);
            if (!push(l, TK_OP, *op, strlen(*op))) return -1;
            l->pos += strlen(*op);
        }
    }
}

/* {% raw %} at l->pos (just past "{%" and its sign): the text up to
 * {% endraw %} as is.  Returns 1 when the tag is not raw. */
static int lex_raw(jjLexer *l) {
    size_t i = l->pos, k;
    while ((k = space_at(l->s + i, l->n - i))) i += k;
    if (l->n - i < 3 || memcmp(l->s + i, "raw", 3)) return 1;
    i += 3;
    while ((k = space_at(l->s + i, l->n - i))) i += k;
    char sign = i < l->n && l->s[i] == '-' ? '-' : 0;
    if (l->n - i < 2u + (sign != 0) || memcmp(l->s + i + (sign != 0), "%}", 2)) return 1;
    count_lines(l, l->pos, i + 2 + (sign != 0));
    l->pos = i + 2 + (sign != 0);
    after_close(l, sign, 0);
    for (size_t s = l->pos; s + 1 < l->n; s++) {
        if (memcmp(l->s + s, "{%", 2)) continue;
        size_t j = s + 2;
        char open_sign = j < l->n && (l->s[j] == '-' || l->s[j] == '+') ? l->s[j++] : 0;
        while ((k = space_at(l->s + j, l->n - j))) j += k;
        if (l->n - j < 6 || memcmp(l->s + j, "endraw", 6)) continue;
        j += 6;
        while ((k = space_at(l->s + j, l->n - j))) j += k;
        char close_sign = j < l->n && (l->s[j] == '-' || l->s[j] == '+') ? l->s[j++] : 0;
        if (l->n - j < 2 || memcmp(l->s + j, "%}", 2)) continue;
        if (emit_text(l, l->pos, s, open_sign, 0)) return -1;
        count_lines(l, s, j + 2);
        l->pos = j + 2;
        after_close(l, close_sign, 1);
        return 0;
    }
    return lex_fail(l, "{%% raw %%} without {%% endraw %%}");
}

int jj_lex(const char *src, size_t len, jjArena *arena, jjTokens *out, rlError *err) {
    /* Newlines normalised to \n and one trailing newline dropped, as
     * Jinja's lexer does before anything else. */
    char *s = jj_alloc(arena, len + 1);
    if (!s) return rl_error(err, RL_EMEMORY, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    jjLexer l = {.s = s, .n = n, .line = 1, .line_starting = 1, .arena = arena, .out = out, .err = err};
    while (l.pos < l.n) {
        const char *open = NULL;
        for (size_t i = l.pos; i + 1 < l.n; i++)
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
                open = s + i;
                break;
            }
        if (!open) {
            if (emit_text(&l, l.pos, l.n, '+', 1)) return -1;
            l.pos = l.n;
            break;
        }
        size_t at = (size_t)(open - s);
        char kind = open[1];
        char sign = at + 2 < l.n && (s[at + 2] == '-' || s[at + 2] == '+') ? s[at + 2] : 0;
        size_t body = at + 2 + (sign != 0);
        if (kind == '%') {
            if (emit_text(&l, l.pos, at, sign, 0)) return -1;
            l.pos = body;
            int raw = lex_raw(&l);
            if (raw < 0) return -1;
            if (raw == 0) continue;
            if (!push(&l, TK_BLOCK_BEGIN, open, 2)) return -1;
            l.line_starting = 0;
            if (lex_tag(&l, 0)) return -1;
        } else if (kind == '{') {
            if (emit_text(&l, l.pos, at, sign, 1)) return -1;
            l.pos = body;
            if (!push(&l, TK_VAR_BEGIN, open, 2)) return -1;
            l.line_starting = 0;
            if (lex_tag(&l, 1)) return -1;
        } else {
            if (emit_text(&l, l.pos, at, sign, 0)) return -1;
            size_t i = body;
            while (i + 1 < l.n && memcmp(s + i, "#}", 2)) i++;
            if (i + 1 >= l.n) return lex_fail(&l, "a {# comment is not closed");
            char close = i > body && (s[i - 1] == '-' || s[i - 1] == '+') ? s[i - 1] : 0;
            count_lines(&l, body, i + 2);
            l.pos = i + 2;
            after_close(&l, close, 1);
        }
    }
    jjToken *eof = push(&l, TK_EOF, "", 0);
    return eof ? 0 : -1;
}
