/* utf8.c: see utf8.h.  The byte ranges are Unicode's Table 3-7 (well-formed
 * UTF-8 byte sequences), which is also what Rust's decoder checks. */
#include "worker/lib/utf8.h"

#include <string.h>

/* Second-byte range allowed after each lead byte; 0,0 for bytes that cannot
 * start a character. */
static void utf8_second_range(unsigned char lead, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (lead == 0xE0) *lo = 0xA0;
    else if (lead == 0xED) *hi = 0x9F;
    else if (lead == 0xF0) *lo = 0x90;
    else if (lead == 0xF4) *hi = 0x8F;
}

static size_t utf8_width(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

utf8Kind utf8_next(const unsigned char *s, size_t n, size_t *len) {
    size_t w = utf8_width(s[0]);
    *len = 1;
    if (w == 1) return UTF8_CHAR;
    if (w == 0) return UTF8_BAD;
    for (size_t i = 1; i < w; i++) {
        if (i >= n) {
            *len = n;
            return UTF8_SHORT;
        }
        unsigned char lo = 0x80, hi = 0xBF;
        if (i == 1) utf8_second_range(s[0], &lo, &hi);
        if (s[i] < lo || s[i] > hi) {
            *len = i;
            return UTF8_BAD;
        }
    }
    *len = w;
    return UTF8_CHAR;
}

int utf8_valid(const char *s, size_t n, size_t *bad_at) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII runs are the common case: skip them eight bytes at a time. */
        while (i + 8 <= n) {
            unsigned long long w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        /* two-byte characters (Latin, Cyrillic, byte-level vocab) inline */
        if (p[i] >= 0xC2 && p[i] <= 0xDF && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
            i += 2;
            continue;
        }
        size_t len;
        if (utf8_next(p + i, n - i, &len) != UTF8_CHAR) {
            if (bad_at) *bad_at = i;
            return 0;
        }
        i += len;
    }
    return 1;
}

int utf8_lossy_append(bytebuf *out, const char *s, size_t n) {
    if (n == 0) return 0;
    size_t i = 0;   /* valid text (the common case) is one scan and one copy */
    if (utf8_valid(s, n, &i)) return bytebuf_append(out, s, n);
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0; /* start of the valid bytes not yet copied */
    int replaced = 0;
    while (i < n) {
        size_t len;
        if (utf8_next(p + i, n - i, &len) == UTF8_CHAR) {
            i += len;
            continue;
        }
        if (bytebuf_append(out, s + run, i - run) || bytebuf_append(out, UTF8_REPLACEMENT, 3))
            return -1;
        replaced++;
        i += len;
        run = i;
    }
    return bytebuf_append(out, s + run, n - run) ? -1 : replaced;
}
