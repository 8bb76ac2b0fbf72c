/* safetensors.c: mapping and validating one .safetensors file.
 *
 * Everything in the header is untrusted: sizes are checked for overflow,
 * every byte range against the file, and ranges against each other, before
 * any tensor pointer is formed. */
#include "worker/model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation's limit; larger is a corrupt length field. */
#define RL_ST_MAX_HEADER (100u << 20)

#define RL_ST_REDOWNLOAD "Download the file again from the model's repository."

static int st_corrupt(rlError *err, const char *path, const char *what, const char *name) {
    return rl_error(err, RL_EMODEL,
                    "%s: corrupt safetensors header: %s%s%s%s. The file is damaged or is not a "
                    "safetensors file. " RL_ST_REDOWNLOAD,
                    path, what, name ? " (tensor \"" : "", name ? name : "", name ? "\")" : "");
}

/* Recognizes the formats people most often hand over instead. */
static int st_check_magic(const unsigned char *p, size_t len, const char *path, rlError *err) {
    if (len >= 4 && memcmp(p, "GGUF", 4) == 0)
        return rl_error(err, RL_EMODEL,
                        "%s is a GGUF file (llama.cpp's format), not Hugging Face safetensors. "
                        "redlm loads Hugging Face checkpoints: download the model's original "
                        "repository instead of a -GGUF one (config.json, generation_config.json "
                        "and *.safetensors), e.g. `huggingface-cli download "
                        "Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR`.", path);
    int zip = len >= 4 && memcmp(p, "PK\x03\x04", 4) == 0;
    int pickle = len >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5;
    if (zip || pickle)
        return rl_error(err, RL_EMODEL,
                        "%s is a PyTorch checkpoint (torch.save %s), not safetensors. Download "
                        "the repository's .safetensors files instead, or convert with "
                        "transformers: AutoModelForCausalLM.from_pretrained(DIR)"
                        ".save_pretrained(OUT, safe_serialization=True).",
                        path, zip ? "zip archive" : "pickle");
    return 0;
}

static int st_parse_dtype(const char *s, rlDtype *out) {
    if (strcmp(s, "BF16") == 0) *out = RL_BF16;
    else if (strcmp(s, "F16") == 0) *out = RL_F16;
    else if (strcmp(s, "F32") == 0) *out = RL_F32;
    else if (strcmp(s, "I32") == 0) *out = RL_I32;          /* packed AWQ / GPTQ */
    else if (strcmp(s, "F8_E4M3") == 0) *out = RL_F8_E4M3;  /* FP8 weights */
    else return -1;
    return 0;
}

/* Fills t from one header entry.  An entry reaching past data_len only
 * raises *data_end, so a truncated file is reported with its full extent. */
static int st_parse_entry(rlSafetensors *st, rlStTensor *t, const char *name, json_t *e,
                          const unsigned char *data, size_t data_len, uint64_t *data_end,
                          rlError *err) {
    const char *path = st->path;
    json_t *dtype = json_object_get(e, "dtype");
    json_t *shape = json_object_get(e, "shape");
    json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(dtype) || !json_is_array(shape) ||
        !json_is_array(offs) || json_array_size(offs) != 2)
        return st_corrupt(err, path, "an entry lacks a string \"dtype\", an array \"shape\" or "
                          "a two-element \"data_offsets\"", name);
    if (st_parse_dtype(json_string_value(dtype), &t->dtype))
        return rl_error(err, RL_EMODEL,
                        "%s: tensor \"%s\" has unsupported dtype %s: redlm loads BF16, F16 and "
                        "F32 weights, and the I32 and F8_E4M3 tensors of AWQ, GPTQ and FP8 "
                        "checkpoints. Use the model's unquantized repository or one of those "
                        "formats, or convert with transformers: from_pretrained(DIR, "
                        "torch_dtype=torch.bfloat16).save_pretrained(OUT, "
                        "safe_serialization=True).", path, name, json_string_value(dtype));
    if (json_array_size(shape) > RL_ST_MAX_DIMS)
        return st_corrupt(err, path, "a shape has too many dimensions", name);
    t->ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 ||
            (uint64_t)json_integer_value(d) > (uint64_t)1 << 40)
            return st_corrupt(err, path, "a shape entry is not a plausible size", name);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] != 0 && count > ((uint64_t)1 << 62) / (uint64_t)t->shape[i])
            return st_corrupt(err, path, "a shape is impossibly large", name);
        count *= (uint64_t)t->shape[i];
    }
    json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return st_corrupt(err, path, "\"data_offsets\" are not an ordered pair of sizes", name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(en);
    if (end - begin != count * rl_dtype_size(t->dtype))
        return st_corrupt(err, path, "a byte range does not match its shape and dtype", name);
    if (end > *data_end) *data_end = end;
    if (end > data_len) return 0;  /* truncated: reported once all entries are read */
    /* The mapping is page-aligned; HF writers pad the header so every
     * tensor is aligned too, which lets readers use typed pointers. */
    if ((uintptr_t)(data + begin) % rl_dtype_size(t->dtype) != 0)
        return rl_error(err, RL_EMODEL,
                        "%s: tensor \"%s\" is not aligned to its %zu-byte elements in the file "
                        "(an unpadded header, from a non-standard writer). Re-save the checkpoint "
                        "with transformers' save_pretrained(OUT, safe_serialization=True).",
                        path, name, rl_dtype_size(t->dtype));
    t->data = data + begin;
    t->nbytes = (size_t)(end - begin);
    return 0;
}

static int st_cmp_name(const void *a, const void *b) {
    return strcmp(((const rlStTensor *)a)->name, ((const rlStTensor *)b)->name);
}

static int st_cmp_data(const void *a, const void *b) {
    const rlStTensor *x = *(const rlStTensor *const *)a, *y = *(const rlStTensor *const *)b;
    const char *px = x->data, *py = y->data;
    return (px > py) - (px < py);
}

/* Two tensors sharing bytes means the offsets were damaged.  An empty
 * tensor holds no bytes: writers place it at the next tensor's start. */
static int st_check_overlap(rlSafetensors *st, rlError *err) {
    if (st->n_tensors < 2) return 0;
    const rlStTensor **by = malloc((size_t)st->n_tensors * sizeof(*by));
    if (!by) return rl_error(err, RL_EMEMORY, "out of memory reading %s", st->path);
    for (int i = 0; i < st->n_tensors; i++) by[i] = &st->tensors[i];
    qsort(by, (size_t)st->n_tensors, sizeof(*by), st_cmp_data);
    int rc = 0;
    const char *end = NULL;  /* the furthest end of the ranges so far */
    for (int i = 0; i < st->n_tensors && rc == 0; i++) {
        const char *p = by[i]->data;
        if (!by[i]->nbytes) continue;
        if (end && p < end)
            rc = st_corrupt(err, st->path, "two tensors' byte ranges overlap", by[i]->name);
        if (!end || p + by[i]->nbytes > end) end = p + by[i]->nbytes;
    }
    free(by);
    return rc;
}

static int st_parse_header(rlSafetensors *st, const unsigned char *p, size_t len, rlError *err) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen < 2 || hlen > RL_ST_MAX_HEADER)
        return st_corrupt(err, st->path, "the header length field is not plausible", NULL);
    if (hlen > len - 8)
        return rl_error(err, RL_EMODEL,
                        "%s is truncated: it ends inside its own header (%zu bytes, the header "
                        "alone needs %llu). This is usually an interrupted download. "
                        RL_ST_REDOWNLOAD, st->path, len, (unsigned long long)hlen + 8);
    const char *hdr = (const char *)p + 8;
    if (hdr[0] != '{') return st_corrupt(err, st->path, "the header is not a JSON object", NULL);
    json_error_t jerr;
    json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        char what[256];
        snprintf(what, sizeof(what), "the header is not valid JSON (%s at byte %d)", jerr.text,
                 jerr.position);
        return st_corrupt(err, st->path, what, NULL);
    }
    size_t n = json_object_size(root);
    st->tensors = calloc(n ? n : 1, sizeof(*st->tensors));
    if (!st->tensors) {
        json_decref(root);
        return rl_error(err, RL_EMEMORY, "out of memory reading %s", st->path);
    }
    const unsigned char *data = p + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;
    const char *name;
    json_t *e;
    int rc = 0;
    uint64_t data_end = 0;
    json_object_foreach(root, name, e) {
        if (strcmp(name, "__metadata__") == 0) continue;
        rlStTensor *t = &st->tensors[st->n_tensors];
        rc = st_parse_entry(st, t, name, e, data, data_len, &data_end, err);
        if (rc) break;
        if (!(t->name = strdup(name))) {
            rc = rl_error(err, RL_EMEMORY, "out of memory reading %s", st->path);
            break;
        }
        st->n_tensors++;
    }
    json_decref(root);
    if (rc) return rc;
    if (data_end > data_len)
        return rl_error(err, RL_EMODEL,
                        "%s is truncated: it is %zu bytes long but its header describes "
                        "%llu bytes (%llu missing). This is usually an interrupted download. "
                        RL_ST_REDOWNLOAD, st->path, len,
                        (unsigned long long)(8 + hlen + data_end),
                        (unsigned long long)(data_end - data_len));
    qsort(st->tensors, (size_t)st->n_tensors, sizeof(*st->tensors), st_cmp_name);
    return st_check_overlap(st, err);
}

int safetensors_open(rlSafetensors *st, const char *path, rlError *err) {
    memset(st, 0, sizeof(*st));
    st->path = strdup(path);
    if (!st->path) return rl_error(err, RL_EMEMORY, "out of memory opening %s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        safetensors_close(st);
        if (e == EACCES)
            return rl_error(err, RL_EMODEL, "%s cannot be read: permission denied. Make the "
                            "model files readable by the user running redlm (chmod a+r).", path);
        return rl_error(err, RL_EMODEL, "%s cannot be opened: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        safetensors_close(st);
        return rl_error(err, RL_EMODEL, "%s is not a regular file; a safetensors weight file "
                        "was expected.", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        safetensors_close(st);
        return rl_error(err, RL_EMODEL, "%s cannot be mapped into memory: %s", path,
                        strerror(map_errno));
    }
    st->map = map;
    st->map_len = len;
    if (st_check_magic(map, len, path, err)) {
        safetensors_close(st);
        return -1;
    }
    if (len < 8) {
        safetensors_close(st);
        return rl_error(err, RL_EMODEL,
                        "%s is truncated: it is %zu bytes long, too short even for a "
                        "safetensors header. This is usually an interrupted download. "
                        RL_ST_REDOWNLOAD, path, len);
    }
    if (st_parse_header(st, map, len, err)) {
        safetensors_close(st);
        return -1;
    }
    return 0;
}

void safetensors_close(rlSafetensors *st) {
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    if (st->map) munmap(st->map, st->map_len);
    free(st->path);
    memset(st, 0, sizeof(*st));
}
