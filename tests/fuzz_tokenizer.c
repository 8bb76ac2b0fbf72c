/* fuzz_tokenizer.c: libFuzzer target for encode, decode and streaming
 * (`make fuzz`, clang with -fsanitize=fuzzer,address,undefined).
 *
 * The first byte picks the mode (mod 3):
 *   0: the rest is text; encoding must succeed exactly when it is valid
 *         UTF-8 (else invalid_utf8), and decoding the ids must give valid
 *         UTF-8;
 *   1: the rest is token ids (any values, unknown ones included) and a
 *         stop string; decoding must give valid UTF-8, and streaming them
 *         must give the full decode up to the stop string's first
 *         occurrence;
 *   2: the rest is a tokenizer.json: loading it fails cleanly or gives a
 *      tokenizer that encodes a fixed text.
 * The tokenizer is tests/fixtures/tokenizer-small (or $REDLM_FUZZ_TOKENIZER). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/lib/bytebuf.h"
#include "worker/tokenizer/tokenizer.h"
#include "worker/tokenizer/tokenizer_impl.h"
#include "worker/lib/utf8.h"

static rlTokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("REDLM_FUZZ_TOKENIZER");
    rlError err = {0};
    tok = tokenizer_load(path ? path : "tests/fixtures/tokenizer-small/tokenizer.json", &err);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    return 0;
}

static void fuzz_text(const char *s, size_t n) {
    int32_t *ids;
    int n_ids;
    rlError err = {0};
    int valid = utf8_valid(s, n, NULL);
    int rc = tokenizer_encode(tok, s, n, &ids, &n_ids, &err);
    if (!valid) {
        if (rc == 0 || strncmp(err.msg, "invalid_utf8:", 13)) abort();
        return;
    }
    if (rc) abort();
    char *text;
    size_t len;
    if (tokenizer_decode(tok, ids, n_ids, &text, &len, &err) || !utf8_valid(text, len, NULL)) abort();
    /* ASCII is left alone by NFC, so it must come back unchanged. */
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++) ascii = (unsigned char)s[i] < 0x80;
    if (ascii && (len != n || memcmp(text, s, n))) abort();
    free(text);
    free(ids);
}

static void fuzz_ids(const unsigned char *data, size_t size) {
    /* data[0] % 4 bytes of stop string (dropped unless valid UTF-8), then ids */
    size_t slen = size ? data[0] % 4u : 0;
    if (size < 1 + slen) return;
    char stop[4] = {0};
    memcpy(stop, data + 1, slen);
    if (!utf8_valid(stop, slen, NULL) || memchr(stop, 0, slen)) slen = 0;
    stop[slen] = 0;
    size_t skip = 1 + (size_t)(data[0] % 4u);
    data += skip;
    size -= skip;
    int n = (int)(size / 2);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof(*ids));
    /* two bytes an id, spread over the vocab and a little past both ends */
    int span = tokenizer_vocab_size(tok) + 16;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((data[2 * i] | data[2 * i + 1] << 8) % span) - 8;
    char *full;
    size_t flen;
    rlError err = {0};
    if (tokenizer_decode(tok, ids, n, &full, &flen, &err) || !utf8_valid(full, flen, NULL)) abort();
    char *stops[] = {stop};
    rlDetok *d = detok_create(tok, stops, slen ? 1 : 0, 0, &err);
    if (!d) abort();
    bytebuf got = {0};
    size_t len;
    for (int i = 0; i < n; i++) {
        int stopped;
        if (detok_push(d, ids[i], &stopped, &err)) abort();
        const char *s = detok_take(d, &len);
        if (!utf8_valid(s, len, NULL)) abort();
        bytebuf_append(&got, s, len);
        if (stopped) break;
    }
    const char *s = detok_finish(d, &len);
    bytebuf_append(&got, s, len);
    const char *hit = slen ? memmem(full, flen, stop, slen) : NULL;
    size_t want = hit ? (size_t)(hit - full) : flen;
    if (got.len != want || memcmp(got.data ? got.data : "", full, want)) abort();
    bytebuf_free(&got);
    detok_free(d);
    free(full);
    free(ids);
}

static void fuzz_json(const char *s, size_t n) {
    rlError err = {0};
    rlTokenizer *t = tokenizer_parse(s, n, &err);
    if (!t) {
        if (!err.msg[0]) abort();
        return;
    }
    int32_t *ids;
    int n_ids;
    static const char text[] = "Hello, world! <|im_start|>x\xC3\xA9 12";
    if (tokenizer_encode(t, text, sizeof(text) - 1, &ids, &n_ids, &err) == 0) free(ids);
    tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: fuzz_text((const char *)data + 1, size - 1); break;
    case 1: fuzz_ids(data + 1, size - 1); break;
    default: fuzz_json((const char *)data + 1, size - 1); break;
    }
    return 0;
}
