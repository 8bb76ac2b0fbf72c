/* detok.c: incremental detokenizing for streamed replies (see tokenizer.h).
 *
 * Three stages, each a buffer:
 *   bytes  model-token bytes that do not yet end on a character boundary;
 *   held   text that could still be the start of a stop string;
 *   ready  text for the next detok_take.
 * Bytes become text exactly as tokenizer_decode would turn them (maximal
 * invalid subparts to U+FFFD, added tokens closing the byte run), so the
 * chunks concatenate to the full decode.  A stop string can only begin in
 * held text, because held keeps the longest suffix that is a prefix of
 * some stop string; so each push searches a window no longer than the
 * longest stop string plus the new text. */
#include <stdlib.h>
#include <string.h>

#include "worker/lib/bytebuf.h"
#include "worker/tokenizer/tokenizer_impl.h"
#include "worker/lib/utf8.h"

struct rlDetok {
    const rlTokenizer *t;
    char **stops;
    size_t *stop_len;
    int *stop_index;    /* each kept stop string's index in the list given */
    int n_stops;
    unsigned flags;     /* RL_DETOK_* */
    bytebuf bytes, held, ready;
    int taken;      /* ready was handed out: clear it on the next call */
    int stopped, finished;  /* stopped: 1 + the stop string's index given */
    int pushed, min_tokens; /* stop strings are looked for once pushed > min_tokens */
};

rlDetok *detok_create(const rlTokenizer *t, char *const *stops, int n_stops, unsigned flags,
                      rlError *err) {
    rlDetok *d = calloc(1, sizeof(*d));
    if (!d || (n_stops > 0 && (!(d->stops = calloc((size_t)n_stops, sizeof(*d->stops))) ||
                               !(d->stop_len = calloc((size_t)n_stops, sizeof(*d->stop_len))) ||
                               !(d->stop_index = calloc((size_t)n_stops, sizeof(int)))))) {
        detok_free(d);
        rl_error(err, RL_EMEMORY, "out of memory");
        return NULL;
    }
    d->t = t;
    d->flags = flags;
    for (int i = 0; i < n_stops; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0, bad;
        if (len == 0) continue;   /* an empty stop string would match before any text */
        if (!utf8_valid(stops[i], len, &bad)) {
            detok_free(d);
            rl_error(err, RL_EINPUT, "invalid_utf8: stop string %d is not valid UTF-8 (byte %zu)", i, bad);
            return NULL;
        }
        if (!(d->stops[d->n_stops] = strdup(stops[i]))) {
            detok_free(d);
            rl_error(err, RL_EMEMORY, "out of memory");
            return NULL;
        }
        d->stop_index[d->n_stops] = i;
        d->stop_len[d->n_stops++] = len;
    }
    return d;
}

void detok_free(rlDetok *d) {
    if (!d) return;
    for (int i = 0; i < d->n_stops; i++) free(d->stops[i]);
    free(d->stops);
    free(d->stop_len);
    free(d->stop_index);
    bytebuf_free(&d->bytes);
    bytebuf_free(&d->held);
    bytebuf_free(&d->ready);
    free(d);
}

void detok_min_tokens(rlDetok *d, int n) { d->min_tokens = n; }

static void detok_untake(rlDetok *d) {
    if (d->taken) bytebuf_clear(&d->ready);
    d->taken = 0;
}

/* Move the complete characters at the front of bytes into held; at the end
 * of a run (final) an incomplete tail becomes U+FFFD too. */
static int detok_bytes_to_text(rlDetok *d, int final) {
    const unsigned char *p = (const unsigned char *)d->bytes.data;
    size_t i = 0, n = d->bytes.len;
    while (i < n) {
        size_t len;
        utf8Kind k = utf8_next(p + i, n - i, &len);
        if (k == UTF8_SHORT && !final) break;
        if (k == UTF8_CHAR ? bytebuf_append(&d->held, p + i, len)
                           : bytebuf_append(&d->held, UTF8_REPLACEMENT, 3))
            return -1;
        i += len;
    }
    bytebuf_consume(&d->bytes, i);
    return 0;
}

/* Find a complete stop string (ending generation) or release the text
 * that can no longer begin one. */
static int detok_scan(rlDetok *d) {
    const char *h = d->held.data;
    size_t n = d->held.len, cut = n, keep_from = n;
    int which = -1;     /* the stop string found first in the text */
    int armed = d->pushed > d->min_tokens;
    for (int s = 0; s < d->n_stops && n; s++) {
        const char *hit = armed ? memmem(h, n, d->stops[s], d->stop_len[s]) : NULL;
        if (hit && (size_t)(hit - h) < cut) {
            cut = (size_t)(hit - h);
            which = s;
        }
        size_t L = d->stop_len[s];
        for (size_t k = n >= L ? n - L + 1 : 0; k < n; k++) {
            if (k < keep_from && !memcmp(h + k, d->stops[s], n - k)) {
                keep_from = k;
                break;
            }
        }
    }
    if (cut < n) {
        d->stopped = 1 + d->stop_index[which];
        if (d->flags & RL_DETOK_KEEP_STOP) cut += d->stop_len[which];
        if (bytebuf_append(&d->ready, h, cut)) return -1;
        bytebuf_clear(&d->held);
        bytebuf_clear(&d->bytes);
        return 0;
    }
    if (bytebuf_append(&d->ready, h, keep_from)) return -1;
    bytebuf_consume(&d->held, keep_from);
    return 0;
}

int detok_push(rlDetok *d, int32_t id, int *stopped, rlError *err) {
    detok_untake(d);
    *stopped = d->stopped;
    if (d->stopped || d->finished) return 0;
    d->pushed++;
    const char *s;
    size_t n;
    int rc = 0;
    switch (tokenizer_piece(d->t, id, &s, &n)) {
    case TOK_MODEL:
        rc = bytebuf_append(&d->bytes, s, n) || detok_bytes_to_text(d, 0);
        break;
    case TOK_ADDED:
        /* a skipped special token leaves nothing, as if it were not there
         * (transformers drops it before decoding) */
        if ((d->flags & RL_DETOK_SKIP_SPECIAL) && tokenizer_is_special(d->t, id)) return 0;
        rc = detok_bytes_to_text(d, 1) || bytebuf_append(&d->held, s, n);
        break;
    case TOK_NONE:
        return 0;
    }
    if (rc || detok_scan(d)) return rl_error(err, RL_EMEMORY, "out of memory");
    *stopped = d->stopped;
    return 0;
}

const char *detok_take(rlDetok *d, size_t *len) {
    detok_untake(d);
    d->taken = 1;
    if (len) *len = d->ready.len;
    return d->ready.data ? d->ready.data : "";
}

const char *detok_finish(rlDetok *d, size_t *len) {
    detok_untake(d);
    if (!d->stopped && !d->finished) {
        /* On failure (no memory) the held text is still released below. */
        if (detok_bytes_to_text(d, 1) == 0) detok_scan(d);
        if (!d->stopped) bytebuf_append(&d->ready, d->held.data, d->held.len);
        bytebuf_clear(&d->held);
    }
    d->finished = 1;
    return detok_take(d, len);
}
