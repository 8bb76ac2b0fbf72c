/* pretok.c: see pretok.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretok.h"

#include <pcre2.h>

int pretok_compile(pretok *p, const char *pattern, size_t len, int is_regex, rlError *err) {
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (is_regex ? 0 : PCRE2_LITERAL);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return rl_error(err, RL_EMODEL,
                        "pre_tokenizer Split pattern /%.*s/ does not compile at offset %zu: %s",
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
