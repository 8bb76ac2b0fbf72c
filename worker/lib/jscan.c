/* jscan.c: see jscan.h.  Strings follow RFC 8259 exactly (no control
 * characters, \u escapes with surrogate pairs); the caller has already
 * checked that the whole document is valid UTF-8. */
#include "worker/lib/jscan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int jscan_fail(jscan *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jscan_fail(jscan *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof(j->err), fmt, ap);
    va_end(ap);
    return -1;
}

void jscan_init(jscan *j, const char *s, size_t n) {
    j->start = j->p = s;
    j->end = s + n;
    j->err[0] = 0;
}

int jscan_line(const jscan *j) {
    int line = 1;
    for (const char *q = j->start; q < j->p && q < j->end; q++)
        if (*q == '\n') line++;
    return line;
}

int jscan_peek(jscan *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
    return j->p < j->end ? (unsigned char)*j->p : 0;
}

static int jscan_expect(jscan *j, char c) {
    if (jscan_peek(j) != (unsigned char)c) return jscan_fail(j, "expected '%c'", c);
    j->p++;
    return 0;
}

static int jscan_hex4(jscan *j, unsigned *v) {
    if (j->end - j->p < 4) return jscan_fail(j, "truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else return jscan_fail(j, "bad hex digit in \\u escape");
        *v = *v << 4 | d;
    }
    return 0;
}

static int jscan_put_cp(bytebuf *out, unsigned cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (char)(0x80 | (cp >> 6 & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return bytebuf_append(out, b, n);
}

static int jscan_escape(jscan *j, bytebuf *out) {
    if (j->p >= j->end) return jscan_fail(j, "unterminated string");
    char c = *j->p++;
    const char *simple = strchr("\"\\/bfnrt", c);
    if (simple && c) {
        static const char repl[] = "\"\\/\b\f\n\r\t";
        return bytebuf_putc(out, repl[simple - "\"\\/bfnrt"]) ? jscan_fail(j, "out of memory") : 0;
    }
    if (c != 'u') return jscan_fail(j, "bad escape '\\%c'", c);
    unsigned cp;
    if (jscan_hex4(j, &cp)) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return jscan_fail(j, "lone low surrogate \\u%04X", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned lo;
        if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
            return jscan_fail(j, "lone high surrogate \\u%04X", cp);
        j->p += 2;
        if (jscan_hex4(j, &lo)) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF) return jscan_fail(j, "lone high surrogate \\u%04X", cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return jscan_put_cp(out, cp) ? jscan_fail(j, "out of memory") : 0;
}

int jscan_string(jscan *j, bytebuf *out) {
    bytebuf_clear(out);
    if (jscan_expect(j, '"')) return jscan_fail(j, "expected a string");
    for (;;) {
        const char *run = j->p;
        while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20)
            j->p++;
        if (bytebuf_append(out, run, (size_t)(j->p - run))) return jscan_fail(j, "out of memory");
        if (j->p >= j->end) return jscan_fail(j, "unterminated string");
        char c = *j->p++;
        if (c == '"') return 0;
        if (c != '\\') return jscan_fail(j, "control character inside a string");
        if (jscan_escape(j, out)) return -1;
    }
}

int jscan_int(jscan *j, long long *v) {
    jscan_peek(j);
    const char *q = j->p;
    if (q < j->end && *q == '-') q++;
    if (q >= j->end || *q < '0' || *q > '9') return jscan_fail(j, "expected an integer");
    long long x = 0;
    while (q < j->end && *q >= '0' && *q <= '9') {
        if (x > 100000000000LL) return jscan_fail(j, "integer out of range");
        x = x * 10 + (*q++ - '0');
    }
    if (q < j->end && (*q == '.' || *q == 'e' || *q == 'E')) return jscan_fail(j, "expected an integer");
    *v = *j->p == '-' ? -x : x;
    j->p = q;
    return 0;
}

int jscan_object_next(jscan *j, int *first, bytebuf *key) {
    if (*first) {
        if (jscan_expect(j, '{')) return jscan_fail(j, "expected an object");
        *first = 0;
        if (jscan_peek(j) == '}') { j->p++; return 0; }
    } else {
        int c = jscan_peek(j);
        if (c == '}') { j->p++; return 0; }
        if (c != ',') return jscan_fail(j, "expected ',' or '}' in an object");
        j->p++;
    }
    if (jscan_string(j, key)) return -1;
    return jscan_expect(j, ':') ? -1 : 1;
}

int jscan_array_next(jscan *j, int *first) {
    if (*first) {
        if (jscan_expect(j, '[')) return jscan_fail(j, "expected an array");
        *first = 0;
        if (jscan_peek(j) == ']') { j->p++; return 0; }
        return 1;
    }
    int c = jscan_peek(j);
    if (c == ']') { j->p++; return 0; }
    if (c != ',') return jscan_fail(j, "expected ',' or ']' in an array");
    j->p++;
    return 1;
}

/* Skipping needs no recursion: strings are the only place where brackets
 * do not count, so a depth counter is enough. */
int jscan_value_span(jscan *j, const char **at, size_t *len) {
    jscan_peek(j);
    *at = j->p;
    int depth = 0;
    do {
        if (j->p >= j->end) return jscan_fail(j, "truncated value");
        char c = *j->p;
        if (c == '"') {
            j->p++;
            while (j->p < j->end && *j->p != '"') j->p += *j->p == '\\' ? 2 : 1;
            if (j->p >= j->end) return jscan_fail(j, "unterminated string");
            j->p++;
        } else if (c == '{' || c == '[') {
            depth++;
            j->p++;
        } else if (c == '}' || c == ']') {
            if (--depth < 0) return jscan_fail(j, "unbalanced '%c'", c);
            j->p++;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
            break;
        } else {
            j->p++;
        }
    } while (depth > 0 || (j->p < j->end && !strchr(",}] \n\r\t", *j->p)));
    *len = (size_t)(j->p - *at);
    return 0;
}
