/* pretok.c: see pretok.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "worker/tokenizer/pretok.h"

#include <pcre2.h>
#include <string.h>

#include "worker/lib/bytebuf.h"

/* Hugging Face runs the pattern with Oniguruma, whose Unicode \s is
 * U+0009..U+000D, U+0085 and the Z categories, \w letters, marks, decimal
 * digits and connector punctuation, and \h a hex digit.  PCRE2's \s also
 * takes U+180E (a format character since Unicode 6.3), which would cut
 * "\u180E\u180Ex" differently, its \w takes all numbers but no marks, and
 * its \h is horizontal space.  So these escapes are spelled out as
 * Oniguruma means them. */
static const struct { char esc; const char *members; } pretok_classes[] = {
    {'s', "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}"},
    {'w', "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"},
    {'h', "0-9a-fA-F"},
};

/* Append the replacement for \<e>, or return 1 when e is not rewritten. */
static int pretok_class(char e, int in_class, bytebuf *out) {
    for (size_t k = 0; k < sizeof(pretok_classes) / sizeof(pretok_classes[0]); k++) {
        const char *m = pretok_classes[k].members;
        if (e == pretok_classes[k].esc) {
            if (in_class) return bytebuf_append(out, m, strlen(m));
            return bytebuf_putc(out, '[') || bytebuf_append(out, m, strlen(m)) || bytebuf_putc(out, ']');
        }
        /* the negation, outside a class only: inside one it has no spelling */
        if (e == pretok_classes[k].esc - 32 && !in_class)
            return bytebuf_append(out, "[^", 2) || bytebuf_append(out, m, strlen(m)) || bytebuf_putc(out, ']');
    }
    return 1;
}

static int pretok_rewrite(const char *p, size_t n, bytebuf *out) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[++i];
            int r = pretok_class(e, in_class, out);
            if (r < 0 || (r == 1 && (bytebuf_putc(out, c) || bytebuf_putc(out, e)))) return -1;
            continue;
        }
        if (!in_class && c == '[') {
            /* a leading ']' (after an optional '^') is a literal member */
            in_class = 1;
            if (bytebuf_putc(out, c)) return -1;
            if (i + 1 < n && p[i + 1] == '^' && bytebuf_putc(out, p[++i])) return -1;
            if (i + 1 < n && p[i + 1] == ']' && bytebuf_putc(out, p[++i])) return -1;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            const char *end = memmem(p + i, n - i, ":]", 2);   /* [:alpha:] */
            size_t len = end ? (size_t)(end - (p + i)) + 2 : 1;
            if (bytebuf_append(out, p + i, len)) return -1;
            i += len - 1;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        if (bytebuf_putc(out, c)) return -1;
    }
    return 0;
}

int pretok_compile(pretok *p, const char *pattern, size_t len, int is_regex, rlError *err) {
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (is_regex ? 0 : PCRE2_LITERAL);
    bytebuf re_text = {0};
    if (is_regex && pretok_rewrite(pattern, len, &re_text)) {
        bytebuf_free(&re_text);
        return rl_error(err, RL_EMEMORY, "out of memory");
    }
    pcre2_code *re = is_regex ? pcre2_compile((PCRE2_SPTR)re_text.data, re_text.len, opts, &code, &at, NULL)
                              : pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &at, NULL);
    bytebuf_free(&re_text);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return rl_error(err, RL_EMODEL,
                        "pre_tokenizer Split pattern /%.*s/ does not compile (near offset %zu): %s",
                        (int)(len < 200 ? len : 200), pattern, (size_t)at, (char *)msg);
    }
    /* Without JIT matching is several times slower but still correct. */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    p->code = re;
    return 0;
}

void pretok_free(pretok *p) {
    pcre2_code_free(p->code);
    p->code = NULL;
}

int pretok_split(const pretok *p, const char *s, size_t n, pretokPieceFn fn, void *ctx,
                 rlError *err) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!md) return rl_error(err, RL_EMEMORY, "out of memory");
    int rc = 0;
    size_t pos = 0, done = 0;   /* done: end of the last piece handed out */
    while (pos <= n && rc == 0) {
        int m = pcre2_match(p->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof(msg));
            rc = rl_error(err, RL_EINPUT, "pre-tokenizer regex failed at byte %zu: %s", pos, (char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a > done) rc = fn(ctx, s + done, a - done, err);
        if (rc == 0 && b > a) rc = fn(ctx, s + a, b - a, err);
        done = b > done ? b : done;
        if (b > a) {
            pos = b;
        } else {
            /* An empty match: step over one character, as find_iter does. */
            pos = b + 1;
            while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
        }
    }
    if (rc == 0 && done < n) rc = fn(ctx, s + done, n - done, err);
    pcre2_match_data_free(md);
    return rc;
}
