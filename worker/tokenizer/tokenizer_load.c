/* tokenizer_load.c: reading a Hugging Face tokenizer.json.
 *
 * Only what Qwen2/Qwen2.5 tokenizers use is accepted: a BPE model over the
 * byte-level alphabet, NFC, Split(regex, Isolated) + ByteLevel, and the
 * ByteLevel decoder.  Anything else would silently give different ids, so
 * it is refused with an error naming the part.  The vocab and merges are
 * read with jscan (fast); every other part goes through jansson. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "worker/lib/jscan.h"
#include "worker/tokenizer/tokenizer_impl.h"
#include "worker/lib/utf8.h"

#define TOK_HINT "redlm reads Qwen2/Qwen2.5 byte-level BPE tokenizers only"

/* Mapped, not read: the 11 MB are used once, straight from the page
 * cache, and MAP_POPULATE faults them in with one call. */
static int tok_map_file(const char *path, const char **data, size_t *len, rlError *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == EACCES)
        return rl_error(err, RL_EMODEL, "%s cannot be read: permission denied. Make the model "
                        "files readable by the user running redlm (chmod a+r).", path);
    if (fd < 0) return rl_error(err, RL_EIO, "cannot open %s: %m", path);
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return rl_error(err, RL_EIO, "%s is not a regular file", path);
    }
    *len = (size_t)st.st_size;
    if (*len == 0) {
        close(fd);
        return rl_error(err, RL_EMODEL, "%s is empty", path);
    }
    void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return rl_error(err, RL_EIO, "cannot map %s: %m", path);
    *data = p;
    return 0;
}

/* jansson view of a small value the scanner skipped over. */
static json_t *tok_small_json(jscan *j, const char *what, rlError *err) {
    const char *at;
    size_t len;
    if (jscan_value_span(j, &at, &len)) {
        rl_error(err, RL_EMODEL, "%s: %s (line %d)", what, j->err, jscan_line(j));
        return NULL;
    }
    json_error_t je;
    json_t *v = json_loadb(at, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) rl_error(err, RL_EMODEL, "%s: %s (line %d)", what, je.text, jscan_line(j));
    return v;
}

static const char *tok_type(json_t *v) {
    const char *s = json_string_value(json_object_get(v, "type"));
    return s ? s : "(no type)";
}

static int tok_false(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return !v || json_is_false(v) || json_is_null(v);
}

/* null, "", and absent all mean "none" for the BPE's string options. */
static int tok_empty(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return !v || json_is_null(v) || (json_is_string(v) && !json_string_length(v));
}

static int tok_check_normalizer(rlTokenizer *t, json_t *v, rlError *err) {
    if (json_is_null(v)) return 0;
    const char *type = tok_type(v);
    if (!strcmp(type, "NFC")) {
        t->nfc = 1;
        return 0;
    }
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(v, "normalizers"), *e;
        size_t i;
        json_array_foreach(list, i, e) {
            if (strcmp(tok_type(e), "NFC"))
                return rl_error(err, RL_EMODEL, "normalizer %s is not supported (only NFC; " TOK_HINT ")",
                                tok_type(e));
            t->nfc = 1;
        }
        return 0;
    }
    return rl_error(err, RL_EMODEL, "normalizer %s is not supported (only NFC; " TOK_HINT ")", type);
}

static int tok_check_bytelevel(json_t *v, const char *where, rlError *err) {
    if (strcmp(tok_type(v), "ByteLevel"))
        return rl_error(err, RL_EMODEL, "%s %s is not supported (only ByteLevel; " TOK_HINT ")", where,
                        tok_type(v));
    if (!tok_false(v, "add_prefix_space"))
        return rl_error(err, RL_EMODEL, "%s ByteLevel with add_prefix_space is not supported (" TOK_HINT ")",
                        where);
    return 0;
}

static int tok_check_pre_tokenizer(rlTokenizer *t, json_t *v, rlError *err) {
    json_t *list = json_object_get(v, "pretokenizers");
    if (strcmp(tok_type(v), "Sequence") || json_array_size(list) != 2)
        return rl_error(err, RL_EMODEL,
                        "pre_tokenizer %s is not supported (only Sequence[Split, ByteLevel]; " TOK_HINT ")",
                        tok_type(v));
    json_t *split = json_array_get(list, 0), *bl = json_array_get(list, 1);
    if (strcmp(tok_type(split), "Split"))
        return rl_error(err, RL_EMODEL, "pre_tokenizer %s is not supported (only Split then ByteLevel; " TOK_HINT ")",
                        tok_type(split));
    const char *behavior = json_string_value(json_object_get(split, "behavior"));
    if (!behavior || strcmp(behavior, "Isolated"))
        return rl_error(err, RL_EMODEL, "pre_tokenizer Split behavior %s is not supported (only Isolated)",
                        behavior ? behavior : "(none)");
    if (!tok_false(split, "invert"))
        return rl_error(err, RL_EMODEL, "pre_tokenizer Split with invert is not supported");
    json_t *pat = json_object_get(split, "pattern");
    json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
    if (!json_is_string(re) && !json_is_string(lit))
        return rl_error(err, RL_EMODEL, "pre_tokenizer Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    json_t *p = json_is_string(re) ? re : lit;
    if (pretok_compile(&t->split, json_string_value(p), json_string_length(p), json_is_string(re), err))
        return -1;
    if (tok_check_bytelevel(bl, "pre_tokenizer", err)) return -1;
    if (!tok_false(bl, "use_regex"))
        return rl_error(err, RL_EMODEL, "pre_tokenizer ByteLevel with use_regex is not supported (" TOK_HINT ")");
    return 0;
}

/* NFC of s, malloc'd; *out_len its length. */
static char *tok_nfc(const char *s, size_t n, size_t *out_len) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) return NULL;
    *out_len = (size_t)r;
    return (char *)dst;
}

static int tok_added_tokens(rlTokenizer *t, json_t *list, rlError *err) {
    if (json_is_null(list)) return 0;
    if (!json_is_array(list)) return rl_error(err, RL_EMODEL, "added_tokens must be an array");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_t *id = json_object_get(e, "id"), *content = json_object_get(e, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= BPE_MAX_ID || !json_is_string(content))
            return rl_error(err, RL_EMODEL, "added_tokens[%zu]: needs an \"id\" (0..%d) and a "
                            "\"content\" string", i, BPE_MAX_ID - 1);
        const char *opts[] = {"single_word", "lstrip", "rstrip"};
        for (int k = 0; k < 3; k++)
            if (!tok_false(e, opts[k]))
                return rl_error(err, RL_EMODEL, "added_tokens[%zu] (%s): \"%s\": true is not supported (" TOK_HINT ")",
                                i, json_string_value(content), opts[k]);
        const char *c = json_string_value(content);
        size_t len = json_string_length(content);
        int32_t tid = (int32_t)json_integer_value(id);
        int rc;
        if (json_is_true(json_object_get(e, "normalized")) && t->nfc) {
            size_t nlen;
            char *norm = tok_nfc(c, len, &nlen);
            if (!norm) return rl_error(err, RL_EMODEL, "added_tokens[%zu]: content cannot be normalized", i);
            rc = added_add(&t->norm_added, norm, nlen, tid);
            free(norm);
        } else if (json_is_true(json_object_get(e, "normalized"))) {
            rc = added_add(&t->norm_added, c, len, tid);
        } else {
            rc = added_add(&t->raw_added, c, len, tid);
        }
        if (rc) return rl_error(err, RL_EMEMORY, "out of memory");
        if (tid + 1 > t->n_ids) t->n_ids = tid + 1;
    }
    /* The decode table: by id, the content as written. */
    t->added_text = calloc((size_t)t->n_ids, sizeof(*t->added_text));
    t->added_len = calloc((size_t)t->n_ids, sizeof(*t->added_len));
    t->added_special = calloc((size_t)t->n_ids, 1);
    if (t->n_ids && (!t->added_text || !t->added_len || !t->added_special))
        return rl_error(err, RL_EMEMORY, "out of memory");
    json_array_foreach(list, i, e) {
        json_t *content = json_object_get(e, "content");
        size_t tid = (size_t)json_integer_value(json_object_get(e, "id"));
        free(t->added_text[tid]);
        t->added_special[tid] = json_is_true(json_object_get(e, "special"));
        t->added_len[tid] = json_string_length(content);
        t->added_text[tid] = malloc(t->added_len[tid] + 1);
        if (!t->added_text[tid]) return rl_error(err, RL_EMEMORY, "out of memory");
        memcpy(t->added_text[tid], json_string_value(content), t->added_len[tid] + 1);
    }
    return 0;
}

static int tok_check_model_option(json_t *model, const char *key, rlError *err) {
    if (!strcmp(key, "type")) {
        if (strcmp(tok_type(model), "BPE"))
            return rl_error(err, RL_EMODEL, "model type %s is not supported (only BPE; " TOK_HINT ")", tok_type(model));
    } else if (!strcmp(key, "dropout")) {
        json_t *d = json_object_get(model, key);
        if (!json_is_null(d) && json_number_value(d) != 0.0)
            return rl_error(err, RL_EMODEL, "model.dropout is not supported (BPE dropout is random)");
    } else if (!strcmp(key, "unk_token") || !strcmp(key, "continuing_subword_prefix") ||
               !strcmp(key, "end_of_word_suffix")) {
        if (!tok_empty(model, key))
            return rl_error(err, RL_EMODEL, "model.%s is not supported (" TOK_HINT ")", key);
    } else if (!strcmp(key, "byte_fallback")) {
        if (!tok_false(model, key)) return rl_error(err, RL_EMODEL, "model.byte_fallback is not supported (" TOK_HINT ")");
    } else if (strcmp(key, "fuse_unk") && strcmp(key, "ignore_merges")) {
        return rl_error(err, RL_EMODEL, "model.%s is not supported (" TOK_HINT ")", key);
    }
    return 0;
}

static int tok_vocab(rlTokenizer *t, jscan *j, rlError *err) {
    bytebuf key = {0};
    /* The strings take about a tenth of the file: mostly one allocation. */
    if (bytebuf_reserve(&t->bpe.strs, (size_t)(j->end - j->p) / 10))
        return rl_error(err, RL_EMEMORY, "out of memory");
    int first = 1, r;
    while ((r = jscan_object_next(j, &first, &key)) == 1) {
        long long id;
        if (jscan_int(j, &id)) {
            r = -1;
            break;
        }
        if (bpe_add_token(&t->bpe, key.data, key.len, id, err)) {
            bytebuf_free(&key);
            return -1;
        }
    }
    bytebuf_free(&key);
    if (r < 0) return rl_error(err, RL_EMODEL, "model.vocab: %s (line %d)", j->err, jscan_line(j));
    return bpe_index(&t->bpe, err);
}

/* Merges are "a b" strings (older files) or ["a", "b"] pairs (newer). */
static int tok_merges(rlTokenizer *t, jscan *j, rlError *err) {
    bytebuf a = {0}, b = {0};
    int first = 1, r, rc = -1;
    while ((r = jscan_array_next(j, &first)) == 1) {
        if (jscan_peek(j) == '"') {
            if (jscan_string(j, &a)) goto syntax;
            char *sp = memchr(a.data, ' ', a.len);
            if (!sp) {
                rl_error(err, RL_EMODEL, "model.merges[%d]: \"%s\" is not two tokens separated by a space",
                         t->bpe.n_merges, a.data);
                goto done;
            }
            if (bpe_add_merge(&t->bpe, a.data, (size_t)(sp - a.data), sp + 1,
                              a.len - (size_t)(sp - a.data) - 1, err))
                goto done;
        } else {
            int f2 = 1;
            if (jscan_array_next(j, &f2) != 1 || jscan_string(j, &a) || jscan_array_next(j, &f2) != 1 ||
                jscan_string(j, &b) || jscan_array_next(j, &f2) != 0) {
                if (!j->err[0]) snprintf(j->err, sizeof(j->err), "a merge pair must be [\"a\", \"b\"]");
                goto syntax;
            }
            if (bpe_add_merge(&t->bpe, a.data, a.len, b.data, b.len, err)) goto done;
        }
    }
    if (r == 0) {
        rc = 0;
        goto done;
    }
syntax:
    rl_error(err, RL_EMODEL, "model.merges: %s (line %d)", j->err, jscan_line(j));
done:
    bytebuf_free(&a);
    bytebuf_free(&b);
    return rc;
}

static int tok_model(rlTokenizer *t, jscan *j, rlError *err) {
    bytebuf key = {0};
    json_t *opts = json_object();
    const char *merges_at = NULL;
    size_t merges_len = 0;
    int first = 1, r, have_vocab = 0, rc = -1;
    while ((r = jscan_object_next(j, &first, &key)) == 1) {
        if ((!strcmp(key.data, "vocab") && have_vocab) || (!strcmp(key.data, "merges") && merges_at)) {
            rl_error(err, RL_EMODEL, "model.%s is given twice (line %d): the file is damaged; "
                     "download tokenizer.json again", key.data, jscan_line(j));
            goto done;
        } else if (!strcmp(key.data, "vocab")) {
            if (tok_vocab(t, j, err)) goto done;
            have_vocab = 1;
        } else if (!strcmp(key.data, "merges")) {
            /* The merges need the vocab, which may come later in the object. */
            if (jscan_value_span(j, &merges_at, &merges_len)) break;
        } else {
            json_t *v = tok_small_json(j, "model", err);
            if (!v) goto done;
            json_object_set_new(opts, key.data, v);
        }
    }
    if (r < 0) {
        rl_error(err, RL_EMODEL, "model: %s (line %d)", j->err, jscan_line(j));
        goto done;
    }
    if (!json_object_get(opts, "type")) json_object_set_new(opts, "type", json_string("BPE"));
    const char *k;
    json_t *v;
    json_object_foreach(opts, k, v) if (tok_check_model_option(opts, k, err)) goto done;
    t->bpe.ignore_merges = json_is_true(json_object_get(opts, "ignore_merges"));
    if (!have_vocab) {
        rl_error(err, RL_EMODEL, "model has no vocab");
        goto done;
    }
    if (merges_at) {
        jscan mj;
        jscan_init(&mj, merges_at, merges_len);
        if (tok_merges(t, &mj, err)) goto done;
    }
    rc = 0;
done:
    bytebuf_free(&key);
    json_decref(opts);
    return rc;
}

static int tok_parse(rlTokenizer *t, const char *data, size_t len, rlError *err) {
    jscan j;
    jscan_init(&j, data, len);
    bytebuf key = {0};
    json_t *added = NULL, *norm = NULL, *pre = NULL, *dec = NULL;
    int first = 1, r, rc = -1, have_model = 0;
    while ((r = jscan_object_next(&j, &first, &key)) == 1) {
        if (!strcmp(key.data, "model")) {
            if (have_model) {
                rl_error(err, RL_EMODEL, "\"model\" is given twice (line %d): the file is "
                         "damaged; download tokenizer.json again", jscan_line(&j));
                goto done;
            }
            if (tok_model(t, &j, err)) goto done;
            have_model = 1;
            continue;
        }
        json_t *v = tok_small_json(&j, key.data, err);
        if (!v) goto done;
        if (!strcmp(key.data, "added_tokens")) { json_decref(added); added = v; }
        else if (!strcmp(key.data, "normalizer")) { json_decref(norm); norm = v; }
        else if (!strcmp(key.data, "pre_tokenizer")) { json_decref(pre); pre = v; }
        else if (!strcmp(key.data, "decoder")) { json_decref(dec); dec = v; }
        else if (!strcmp(key.data, "post_processor")) {
            /* ByteLevel's post-processing only adjusts offsets. */
            int ok = json_is_null(v) || !tok_check_bytelevel(v, "post_processor", err);
            json_decref(v);
            if (!ok) goto done;
        } else if (!strcmp(key.data, "truncation") || !strcmp(key.data, "padding")) {
            int ok = json_is_null(v);
            json_decref(v);
            if (!ok) {
                rl_error(err, RL_EMODEL, "%s is not supported (must be null; " TOK_HINT ")", key.data);
                goto done;
            }
        } else {
            json_decref(v);   /* "version" and anything informational */
        }
    }
    if (r < 0) {
        rl_error(err, RL_EMODEL, "%s (line %d)", j.err, jscan_line(&j));
        goto done;
    }
    if (jscan_peek(&j)) {
        rl_error(err, RL_EMODEL, "unexpected data after the top-level object (line %d)", jscan_line(&j));
        goto done;
    }
    if (!have_model) {
        rl_error(err, RL_EMODEL, "no \"model\"");
        goto done;
    }
    if (!pre || json_is_null(pre)) {
        rl_error(err, RL_EMODEL, "pre_tokenizer null is not supported (only Sequence[Split, ByteLevel]; " TOK_HINT ")");
        goto done;
    }
    if (!dec || json_is_null(dec)) {
        rl_error(err, RL_EMODEL, "decoder null is not supported (only ByteLevel; " TOK_HINT ")");
        goto done;
    }
    t->n_ids = t->bpe.n_ids;
    if ((norm && tok_check_normalizer(t, norm, err)) || tok_check_pre_tokenizer(t, pre, err) ||
        tok_check_bytelevel(dec, "decoder", err) || tok_added_tokens(t, added ? added : json_null(), err))
        goto done;
    rc = 0;
done:
    bytebuf_free(&key);
    json_decref(added);
    json_decref(norm);
    json_decref(pre);
    json_decref(dec);
    return rc;
}

rlTokenizer *tokenizer_parse(const char *data, size_t len, rlError *err) {
    size_t bad;
    if (!utf8_valid(data, len, &bad)) {
        rl_error(err, RL_EMODEL, "not valid UTF-8 at byte %zu", bad);
        return NULL;
    }
    rlTokenizer *t = calloc(1, sizeof(*t));
    if (!t) {
        rl_error(err, RL_EMEMORY, "out of memory");
        return NULL;
    }
    bpe_init(&t->bpe);
    if (tok_parse(t, data, len, err)) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

rlTokenizer *tokenizer_load(const char *path, rlError *err) {
    const char *data = NULL;
    size_t len = 0;
    if (tok_map_file(path, &data, &len, err)) return NULL;
    rlTokenizer *t = tokenizer_parse(data, len, err);
    munmap((void *)data, len);
    if (!t && err && err->code == RL_EMODEL) {
        char why[RL_ERROR_LEN];
        snprintf(why, sizeof(why), "%s", err->msg);
        rl_error(err, RL_EMODEL, "tokenizer %s: %s. If the file is damaged, download "
                 "tokenizer.json again from the model's repository.", path, why);
    } else if (!t) {
        rl_error_wrap(err, "tokenizer %s", path);
    }
    return t;
}

void tokenizer_free(rlTokenizer *t) {
    if (!t) return;
    bpe_free(&t->bpe);
    pretok_free(&t->split);
    added_free(&t->raw_added);
    added_free(&t->norm_added);
    for (int i = 0; t->added_text && i < t->n_ids; i++) free(t->added_text[i]);
    free(t->added_text);
    free(t->added_len);
    free(t->added_special);
    free(t);
}

int tokenizer_vocab_size(const rlTokenizer *t) {
    return t->n_ids;
}
