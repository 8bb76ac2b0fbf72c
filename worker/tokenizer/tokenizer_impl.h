/* tokenizer_impl.h: the insides of rlTokenizer, shared by the files that
 * implement tokenizer.h (loading, encoding, decoding, detokenizing). */
#ifndef RL_TOKENIZER_IMPL_H
#define RL_TOKENIZER_IMPL_H

#include "worker/tokenizer/added.h"
#include "worker/tokenizer/bpe.h"
#include "worker/tokenizer/pretok.h"
#include "worker/tokenizer/tokenizer.h"

struct rlTokenizer {
    bpeModel bpe;
    int nfc;                /* normalizer: NFC, or none */
    pretok split;
    addedSet raw_added;     /* matched before normalizing ("normalized": false) */
    addedSet norm_added;    /* matched after it, in NFC form ("normalized": true) */
    char **added_text;      /* by id: an added token's content, or NULL */
    size_t *added_len;
    unsigned char *added_special; /* by id: 1 for an added token marked "special" */
    int n_ids;              /* highest id + 1, added tokens included */
};

/* tokenizer_load on a tokenizer.json already in memory (for the fuzzer). */
rlTokenizer *tokenizer_parse(const char *data, size_t len, rlError *err);

typedef enum tokPieceKind { TOK_NONE, TOK_MODEL, TOK_ADDED } tokPieceKind;

/* What an id decodes to: a model token's bytes (to be joined with its
 * neighbours, then made valid UTF-8) or an added token's text (kept as it
 * is, after the preceding bytes are closed off). */
tokPieceKind tokenizer_piece(const rlTokenizer *t, int32_t id, const char **s, size_t *n);

#endif
