/* tokenizer.c: encoding and decoding, in Hugging Face's order.
 *
 * encode: added tokens are cut out of the raw text first; each stretch
 * between them is NFC-normalized, searched again for added tokens that
 * are matched in normalized form, cut by the Split regex, and each piece
 * merged by the BPE model.
 * decode: runs of model tokens are joined as bytes and made valid UTF-8
 * as String::from_utf8_lossy does; added tokens are copied as they are,
 * closing the run before them (so a split character before one becomes
 * U+FFFD), as tokenizers >= 0.20 do. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "worker/tokenizer/tokenizer_impl.h"
#include "worker/lib/utf8.h"

typedef struct tokEncode {
    const rlTokenizer *t;
    bpeIds ids;
} tokEncode;

static int tok_piece(void *ctx, const char *s, size_t n, rlError *err) {
    tokEncode *e = ctx;
    return bpe_encode_word(&e->t->bpe, (const unsigned char *)s, n, &e->ids, err);
}

static int tok_push(tokEncode *e, int32_t id, rlError *err) {
    return bpe_ids_push(&e->ids, id) ? rl_error(err, RL_EMEMORY, "out of memory") : 0;
}

/* Text between added tokens, already normalized. */
static int tok_encode_normalized(tokEncode *e, const char *s, size_t n, rlError *err) {
    size_t at, len;
    int32_t id;
    while (added_find(&e->t->norm_added, s, n, &at, &len, &id)) {
        if (pretok_split(&e->t->split, s, at, tok_piece, e, err) || tok_push(e, id, err)) return -1;
        s += at + len;
        n -= at + len;
    }
    return pretok_split(&e->t->split, s, n, tok_piece, e, err);
}

/* Code points below U+0300 are never changed by NFC nor composed with what
 * follows, and their UTF-8 never has a byte >= 0xCC: such text (ASCII,
 * Latin-1) skips utf8proc. */
static int tok_nfc_stable(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0xCC) return 0;
    return 1;
}

static int tok_encode_raw(tokEncode *e, const char *s, size_t n, rlError *err) {
    if (!n) return 0;
    if (!e->t->nfc || tok_nfc_stable(s, n)) return tok_encode_normalized(e, s, n, err);
    utf8proc_uint8_t *norm = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0)
        return rl_error(err, r == UTF8PROC_ERROR_NOMEM ? RL_EMEMORY : RL_EINPUT, "NFC normalization failed: %s",
                        utf8proc_errmsg(r));
    int rc = tok_encode_normalized(e, (const char *)norm, (size_t)r, err);
    free(norm);
    return rc;
}

int tokenizer_encode(const rlTokenizer *t, const char *text, size_t len, int32_t **ids,
                     int *n_ids, rlError *err) {
    size_t bad;
    *ids = NULL;
    *n_ids = 0;
    if (!utf8_valid(text, len, &bad))
        return rl_error(err, RL_EINPUT, "invalid_utf8: the text is not valid UTF-8 (byte %zu of %zu)", bad,
                        len);
    if (len > (size_t)1 << 30) return rl_error(err, RL_EINPUT, "text of %zu bytes is over the 1 GiB limit", len);
    tokEncode e = {t, {0}};
    size_t at, alen;
    int32_t id;
    while (added_find(&t->raw_added, text, len, &at, &alen, &id)) {
        if (tok_encode_raw(&e, text, at, err) || tok_push(&e, id, err)) goto fail;
        text += at + alen;
        len -= at + alen;
    }
    if (tok_encode_raw(&e, text, len, err)) goto fail;
    if (!e.ids.v && bpe_ids_push(&e.ids, 0) == 0) e.ids.n = 0;   /* a valid pointer even when empty */
    if (!e.ids.v) return rl_error(err, RL_EMEMORY, "out of memory");
    *ids = e.ids.v;
    *n_ids = e.ids.n;
    return 0;
fail:
    free(e.ids.v);
    return -1;
}

int tokenizer_is_special(const rlTokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->added_special && t->added_special[id];
}

tokPieceKind tokenizer_piece(const rlTokenizer *t, int32_t id, const char **s, size_t *n) {
    if (id < 0 || id >= t->n_ids) return TOK_NONE;
    if (t->added_text && t->added_text[id]) {
        *s = t->added_text[id];
        *n = t->added_len[id];
        return TOK_ADDED;
    }
    if (id < t->bpe.n_ids && t->bpe.str[id].len != UINT32_MAX) {
        *s = t->bpe.bytes.data + t->bpe.byte_off[id];
        *n = t->bpe.byte_len[id];
        return TOK_MODEL;
    }
    return TOK_NONE;
}

int tokenizer_decode(const rlTokenizer *t, const int32_t *ids, int n_ids, char **text,
                     size_t *len, rlError *err) {
    bytebuf out = {0}, run = {0};
    int rc = 0;
    for (int i = 0; i < n_ids && rc == 0; i++) {
        const char *s;
        size_t n;
        switch (tokenizer_piece(t, ids[i], &s, &n)) {
        case TOK_MODEL:
            rc = bytebuf_append(&run, s, n);
            break;
        case TOK_ADDED:
            rc = utf8_lossy_append(&out, run.data, run.len) < 0 || bytebuf_append(&out, s, n) ? -1 : 0;
            bytebuf_clear(&run);
            break;
        case TOK_NONE:   /* unknown ids are skipped, as Hugging Face does */
            break;
        }
    }
    if (rc == 0 && utf8_lossy_append(&out, run.data, run.len) < 0) rc = -1;
    bytebuf_free(&run);
    if (rc == 0) *text = bytebuf_steal(&out, len);
    if (rc || !*text) {
        bytebuf_free(&out);
        return rl_error(err, RL_EMEMORY, "out of memory");
    }
    return 0;
}
