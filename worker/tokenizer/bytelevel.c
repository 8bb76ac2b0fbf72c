/* bytelevel.c: see bytelevel.h.  The alphabet is GPT-2's bytes_to_unicode():
 * '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map to themselves, the other
 * 68 bytes to U+0100.. in increasing byte order. */
#include "worker/tokenizer/bytelevel.h"

#include <pthread.h>

#include "worker/lib/utf8.h"

static unsigned bytelevel_chars[256];   /* byte -> character */
static int bytelevel_bytes[0x144];      /* character -> byte, or -1 */
static pthread_once_t bytelevel_once = PTHREAD_ONCE_INIT;

static void bytelevel_init(void) {
    unsigned next = 0x100;
    for (unsigned i = 0; i < 0x144; i++) bytelevel_bytes[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        int self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        bytelevel_chars[b] = self ? b : next++;
        bytelevel_bytes[bytelevel_chars[b]] = (int)b;
    }
}

int bytelevel_decode(const char *s, size_t n, bytebuf *out) {
    pthread_once(&bytelevel_once, bytelevel_init);
    if (bytebuf_reserve(out, n)) return -1;
    const unsigned char *p = (const unsigned char *)s;
    char *dst = out->data + out->len;   /* never longer than the input */
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t len;
        if (p[i] < 0x80) {
            cp = p[i];
            len = 1;
        } else if (utf8_next(p + i, n - i, &len) == UTF8_CHAR && len == 2) {
            cp = (unsigned)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F);
        } else {
            goto foreign;
        }
        int b = cp < 0x144 ? bytelevel_bytes[cp] : -1;
        if (b < 0) goto foreign;
        dst[k++] = (char)b;
        i += len;
    }
    out->len += k;
    out->data[out->len] = 0;
    return 1;
foreign:
    return bytebuf_append(out, s, n) ? -1 : 0;
}

int bytelevel_encode(const unsigned char *s, size_t n, bytebuf *out) {
    pthread_once(&bytelevel_once, bytelevel_init);
    for (size_t i = 0; i < n; i++) {
        unsigned cp = bytelevel_chars[s[i]];
        char b[2];
        if (cp < 0x80) {
            b[0] = (char)cp;
            if (bytebuf_append(out, b, 1)) return -1;
        } else {
            b[0] = (char)(0xC0 | cp >> 6);
            b[1] = (char)(0x80 | (cp & 0x3F));
            if (bytebuf_append(out, b, 2)) return -1;
        }
    }
    return 0;
}
