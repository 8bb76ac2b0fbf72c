/* checkpoint.c: finding, opening and checking a model directory's weights.
 *
 * The checks run in the order a user can act on them: the directory, the
 * config, which weight files exist, each file's integrity, then every
 * tensor against the config (missing, wrong shape, mixed dtype, extra), and
 * last the index's consistency with the shards.  Each failure names the
 * file and says what to do. */
#include "worker/model/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/model/modelcfg.h"
#include "worker/model/quant.h"
#include "worker/model/safetensors.h"

#define RL_CK_INDEX "model.safetensors.index.json"
#define RL_CK_SINGLE "model.safetensors"
#define RL_CK_PATH 4096

typedef struct rlCkEntry {
    const rlStTensor *t;
    int file;
} rlCkEntry;

/* A quantized layer, found and checked at open, served dequantized. */
typedef struct rlCkQuant {
    char *name;          /* the dense weight's name */
    rlQuantLinear w;
} rlCkQuant;

struct rlCheckpoint {
    char *dir;
    rlModelConfig cfg;
    rlCkQuant *quant;    /* sorted by name */
    int n_quant;
    rlSafetensors *files;
    char **file_names;   /* as the index names them */
    int n_files;
    rlCkEntry *entries;  /* every tensor of every file, sorted by name */
    int n_entries;
};

static int ck_join(char *out, const char *dir, const char *name, rlError *err) {
    int n = snprintf(out, RL_CK_PATH, "%s/%s", dir, name);
    if (n < 0 || n >= RL_CK_PATH)
        return rl_error(err, RL_EMODEL, "model path %s/%s is too long", dir, name);
    return 0;
}

static int ck_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int ck_has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int ck_is_gguf(const char *path) {
    unsigned char magic[4] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = read(fd, magic, sizeof(magic));
    close(fd);
    return got == 4 && memcmp(magic, "GGUF", 4) == 0;
}

/* A file given where a directory or config was expected: say what it is. */
static int ck_explain_file(const char *path, rlError *err) {
    if (ck_is_gguf(path))
        return rl_error(err, RL_EMODEL,
                        "%s is a GGUF file (llama.cpp's format), not a Hugging Face model "
                        "directory. redlm loads Hugging Face checkpoints: download the "
                        "model's original repository instead of a -GGUF one, e.g. "
                        "`huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir "
                        "DIR`, and pass DIR.", path);
    return rl_error(err, RL_EMODEL,
                    "%s is a file, not a model directory. Pass the directory that holds "
                    "config.json and the *.safetensors files.", path);
}

/* The path exists, is a directory and can be listed and entered. */
static int ck_check_dir(const char *dir, rlError *err) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno == EACCES)
            return rl_error(err, RL_EMODEL,
                            "model directory %s cannot be reached: permission denied on a "
                            "directory above it. Make the path readable by the user running "
                            "redlm.", dir);
        return rl_error(err, RL_EMODEL,
                        "model directory %s does not exist. Check the --model path, or "
                        "download the model first, e.g. `huggingface-cli download "
                        "Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR`.", dir);
    }
    if (!S_ISDIR(sb.st_mode)) return ck_explain_file(dir, err);
    DIR *d = opendir(dir);
    if (!d || access(dir, X_OK) != 0) {
        int e = errno;
        if (d) closedir(d);
        if (e == EACCES)
            return rl_error(err, RL_EMODEL,
                            "model directory %s cannot be read: permission denied. Make it "
                            "readable by the user running redlm (chmod -R a+rX %s).", dir, dir);
        return rl_error(err, RL_EMODEL, "model directory %s cannot be read: %s", dir,
                        strerror(e));
    }
    closedir(d);
    return 0;
}

int checkpoint_read_config(const char *path, rlModelConfig *cfg, rlError *err) {
    struct stat sb;
    int found = stat(path, &sb) == 0;
    if (found && S_ISDIR(sb.st_mode)) {
        if (ck_check_dir(path, err)) return -1;
    } else if (found && ck_is_gguf(path)) {
        return ck_explain_file(path, err);
    } else if (!found && !ck_has_suffix(path, ".json")) {
        return ck_check_dir(path, err);  /* explains the missing directory */
    }
    return modelcfg_load(path, cfg, err);
}

/* Explains a directory with a config but no safetensors weights. */
static int ck_explain_no_weights(const char *dir, rlError *err) {
    DIR *d = opendir(dir);
    char gguf[256] = "", torch[256] = "", shard[256] = "";
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *n = de->d_name;
        if (!gguf[0] && ck_has_suffix(n, ".gguf"))
            snprintf(gguf, sizeof(gguf), "%s", n);
        else if (!torch[0] && ((strncmp(n, "pytorch_model", 13) == 0 &&
                                ck_has_suffix(n, ".bin")) ||
                               ck_has_suffix(n, ".pt") || ck_has_suffix(n, ".pth")))
            snprintf(torch, sizeof(torch), "%s", n);
        else if (!shard[0] && ck_has_suffix(n, ".safetensors"))
            snprintf(shard, sizeof(shard), "%s", n);
    }
    if (d) closedir(d);
    if (shard[0])
        return rl_error(err, RL_EMODEL,
                        "%s holds safetensors shards (e.g. %s) but no " RL_CK_INDEX " to say "
                        "which tensor lives where. Download " RL_CK_INDEX " from the model's "
                        "repository.", dir, shard);
    if (gguf[0])
        return rl_error(err, RL_EMODEL,
                        "%s holds a GGUF file (%s) instead of Hugging Face safetensors. redlm "
                        "loads Hugging Face checkpoints: download the model's original "
                        "repository instead of a -GGUF one, e.g. `huggingface-cli download "
                        "Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR`.", dir, gguf);
    if (torch[0])
        return rl_error(err, RL_EMODEL,
                        "%s holds PyTorch weights (%s) but no safetensors. Download the "
                        "repository's .safetensors files instead, or convert with transformers: "
                        "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT, "
                        "safe_serialization=True).", dir, torch);
    return rl_error(err, RL_EMODEL,
                    "%s has a config.json but no weights (neither " RL_CK_SINGLE " nor "
                    RL_CK_INDEX "). Download the *.safetensors files of the model, or run with "
                    "--load-format dummy for random weights.", dir);
}

/* Appends a weight file name unless already listed. */
static int ck_add_file(rlCheckpoint *c, const char *name, rlError *err) {
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->file_names[i], name) == 0) return 0;
    char **names = realloc(c->file_names, (size_t)(c->n_files + 1) * sizeof(*names));
    if (!names) return rl_error(err, RL_EMEMORY, "out of memory opening %s", c->dir);
    c->file_names = names;
    if (!(names[c->n_files] = strdup(name)))
        return rl_error(err, RL_EMEMORY, "out of memory opening %s", c->dir);
    c->n_files++;
    return 0;
}

/* Reads the index's weight_map; *map keeps it for the consistency check. */
static int ck_read_index(rlCheckpoint *c, const char *path, json_t **map, rlError *err) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return rl_error(err, RL_EMODEL,
                        "%s is not valid JSON (line %d: %s). The file is damaged: download it "
                        "again from the model's repository.", path, jerr.line, jerr.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(root);
        return rl_error(err, RL_EMODEL,
                        "%s has no \"weight_map\" object mapping tensor names to shard files. "
                        "The file is damaged: download it again from the model's repository.",
                        path);
    }
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        const char *file = json_string_value(v);
        if (!file || !*file || strchr(file, '/') || strcmp(file, "..") == 0) {
            /* name lives in root: the message is written before root goes */
            rl_error(err, RL_EMODEL,
                     "%s: tensor \"%s\" maps to a bad shard name (it must be a file name in the "
                     "model directory). Download the index again from the model's repository.",
                     path, name);
            json_decref(root);
            return -1;
        }
        if (ck_add_file(c, file, err)) {
            json_decref(root);
            return -1;
        }
    }
    *map = json_incref(wm);
    json_decref(root);
    return 0;
}

static int ck_cmp_entry(const void *a, const void *b) {
    return strcmp(((const rlCkEntry *)a)->t->name, ((const rlCkEntry *)b)->t->name);
}

static const rlCkEntry *ck_find(const rlCheckpoint *c, const char *name) {
    rlStTensor key = {.name = (char *)name};
    rlCkEntry k = {.t = &key};
    return bsearch(&k, c->entries, (size_t)c->n_entries, sizeof(k), ck_cmp_entry);
}

/* Maps every weight file and indexes their tensors by name. */
static int ck_open_files(rlCheckpoint *c, rlError *err) {
    c->files = calloc((size_t)c->n_files, sizeof(*c->files));
    if (!c->files) return rl_error(err, RL_EMEMORY, "out of memory opening %s", c->dir);
    int total = 0;
    for (int i = 0; i < c->n_files; i++) {
        char path[RL_CK_PATH];
        if (ck_join(path, c->dir, c->file_names[i], err)) return -1;
        if (!ck_exists(path) && errno == ENOENT)
            return rl_error(err, RL_EMODEL,
                            "shard %s, named by " RL_CK_INDEX ", is missing from %s: the "
                            "download is incomplete. Download the missing shard (or the whole "
                            "repository again).", c->file_names[i], c->dir);
        if (safetensors_open(&c->files[i], path, err)) return -1;
        total += c->files[i].n_tensors;
    }
    c->entries = calloc(total ? (size_t)total : 1, sizeof(*c->entries));
    if (!c->entries) return rl_error(err, RL_EMEMORY, "out of memory opening %s", c->dir);
    for (int i = 0; i < c->n_files; i++)
        for (int j = 0; j < c->files[i].n_tensors; j++)
            c->entries[c->n_entries++] = (rlCkEntry){&c->files[i].tensors[j], i};
    qsort(c->entries, (size_t)c->n_entries, sizeof(*c->entries), ck_cmp_entry);
    for (int i = 1; i < c->n_entries; i++) {
        if (strcmp(c->entries[i].t->name, c->entries[i - 1].t->name) == 0)
            return rl_error(err, RL_EMODEL,
                            "tensor \"%s\" is stored twice, in %s and in %s (%s): the shards "
                            "come from different downloads. Download the model again.",
                            c->entries[i].t->name, c->file_names[c->entries[i - 1].file],
                            c->file_names[c->entries[i].file], c->dir);
    }
    return 0;
}

typedef struct rlCkCheck {
    rlCheckpoint *c;
    char *seen;           /* per entry */
    const rlCkEntry *first;  /* the tensor that fixed the dtype */
    rlError *err;
} rlCkCheck;

static void ck_format_shape(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < n) snprintf(out + used, n - used, "]");
}

/* Finds, checks and records the stored parts of quantized layer `name`
 * (dense shape [n, k]) in place of its .weight. */
static int ck_check_quant(rlCkCheck *k, const char *name, const int64_t *shape) {
    rlCheckpoint *c = k->c;
    rlQuantPart parts[QUANT_N_PARTS];
    if (quant_parts(&c->cfg.quant, name, shape[0], shape[1], parts, k->err))
        return rl_error_wrap(k->err, "checking %s", c->dir);
    rlCkQuant *cq = &c->quant[c->n_quant];
    if (!(cq->name = strdup(name))) return rl_error(k->err, RL_EMEMORY, "out of memory");
    c->n_quant++;
    cq->w = (rlQuantLinear){.q = &c->cfg.quant, .name = cq->name, .n = shape[0], .k = shape[1]};
    size_t stem = strlen(name) - strlen("weight");
    char fmt[64];
    rl_quant_name(&c->cfg.quant, fmt, sizeof(fmt));
    for (int i = 0; i < QUANT_N_PARTS; i++) {
        const rlQuantPart *p = &parts[i];
        if (!p->suffix) continue;
        char part[256];
        snprintf(part, sizeof(part), "%.*s%s", (int)stem, name, p->suffix);
        const rlCkEntry *e = ck_find(c, part);
        if (!e && p->optional) continue;
        if (!e)
            return rl_error(k->err, RL_EMODEL,
                            "tensor \"%s\" is missing from the weights in %s: a %s checkpoint "
                            "stores it for every quantized layer. The download is incomplete or "
                            "config.json's quantization_config does not describe these weights; "
                            "download them together from one repository.", part, c->dir, fmt);
        k->seen[e - c->entries] = 1;
        const rlStTensor *t = e->t;
        int same = p->ndim ? t->ndim == p->ndim : t->ndim <= 1 && (t->ndim == 0 || t->shape[0] == 1);
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            char got[128], want[128];
            ck_format_shape(got, sizeof(got), t->ndim, t->shape);
            if (p->ndim) ck_format_shape(want, sizeof(want), p->ndim, p->shape);
            else snprintf(want, sizeof(want), "[] or [1]");
            return rl_error(k->err, RL_EMODEL,
                            "tensor \"%s\" in %s/%s has shape %s, but config.json (%s, layer "
                            "[%lld, %lld]) implies %s: the weights and config.json belong to "
                            "different models or formats. Download them together from one "
                            "repository.", part, c->dir, c->file_names[e->file], got, fmt,
                            (long long)shape[0], (long long)shape[1], want);
        }
        if (!(p->dtypes & (1u << t->dtype)))
            return rl_error(k->err, RL_EMODEL,
                            "tensor \"%s\" in %s/%s is %s, which a %s checkpoint does not store "
                            "there (%s expected). Download the checkpoint again from its "
                            "repository.", part, c->dir, c->file_names[e->file],
                            rl_dtype_name(t->dtype), fmt,
                            p->dtypes == (1u << RL_I32) ? "int32"
                            : p->dtypes == (1u << RL_F8_E4M3) ? "float8_e4m3fn"
                                                              : "fp32, fp16 or bf16");
        cq->w.data[i] = t->data;
        cq->w.dtype[i] = t->dtype;
    }
    return quant_check(&cq->w, k->err) ? rl_error_wrap(k->err, "checking %s", c->dir) : 0;
}

/* rlTensorVisit, before any tensor is looked at: every quantized layer's
 * sizes pack and group in the format (a config fault, named as one). */
static int ck_check_quant_sizes(void *ctx, const char *name, int ndim, const int64_t *shape) {
    rlCkCheck *k = ctx;
    rlQuantPart parts[QUANT_N_PARTS];
    if (ndim != 2 || !quant_is_linear(&k->c->cfg.quant, name)) return 0;
    if (quant_parts(&k->c->cfg.quant, name, shape[0], shape[1], parts, k->err))
        return rl_error_wrap(k->err, "checking %s", k->c->dir);
    return 0;
}

/* rlTensorVisit: one expected tensor against what is stored. */
static int ck_check_tensor(void *ctx, const char *name, int ndim, const int64_t *shape) {
    rlCkCheck *k = ctx;
    rlCheckpoint *c = k->c;
    if (quant_is_linear(&c->cfg.quant, name)) return ck_check_quant(k, name, shape);
    const rlCkEntry *e = ck_find(c, name);
    if (!e)
        return rl_error(k->err, RL_EMODEL,
                        "tensor \"%s\" is missing from the weights in %s: the download is "
                        "incomplete, or the files are not a %s checkpoint of this "
                        "config.json. Download the model again.", name, c->dir,
                        c->cfg.architecture);
    k->seen[e - c->entries] = 1;
    int same = e->t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = e->t->shape[i] == shape[i];
    if (!same) {
        char got[128], want[128];
        ck_format_shape(got, sizeof(got), e->t->ndim, e->t->shape);
        ck_format_shape(want, sizeof(want), ndim, shape);
        return rl_error(k->err, RL_EMODEL,
                        "tensor \"%s\" in %s/%s has shape %s, but config.json implies %s: the "
                        "weights and config.json belong to different models. Download the "
                        "config and the weights together from one repository.",
                        name, c->dir, c->file_names[e->file], got, want);
    }
    if (e->t->dtype == RL_I32 || e->t->dtype == RL_F8_E4M3)
        return rl_error(k->err, RL_EMODEL,
                        "tensor \"%s\" in %s/%s is %s, quantized data, but config.json's "
                        "quantization_config %s. Use the config.json that came with these "
                        "weights.", name, c->dir, c->file_names[e->file],
                        rl_dtype_name(e->t->dtype),
                        c->cfg.quant.method ? "keeps this tensor unquantized" : "is absent");
    if (!k->first) k->first = e;
    if (e->t->dtype != k->first->t->dtype)
        return rl_error(k->err, RL_EMODEL,
                        "the weights in %s mix dtypes: \"%s\" is %s but \"%s\" is %s. redlm "
                        "needs one dtype for all tensors: convert the checkpoint with "
                        "transformers, from_pretrained(DIR, torch_dtype=torch.bfloat16)"
                        ".save_pretrained(OUT, safe_serialization=True).",
                        c->dir, k->first->t->name, rl_dtype_name(k->first->t->dtype), name,
                        rl_dtype_name(e->t->dtype));
    return 0;
}

/* Tensors the model does not use but that valid checkpoints carry. */
static int ck_is_ignorable(const rlCheckpoint *c, const char *name) {
    if (c->cfg.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) return 1;
    return ck_has_suffix(name, ".rotary_emb.inv_freq");  /* older exports */
}

static int ck_cmp_quant(const void *a, const void *b) {
    return strcmp(((const rlCkQuant *)a)->name, ((const rlCkQuant *)b)->name);
}

static int ck_check_tensors(rlCheckpoint *c, rlError *err) {
    rlCkCheck k = {.c = c, .err = err};
    k.seen = calloc(c->n_entries ? (size_t)c->n_entries : 1, 1);
    if (!k.seen) return rl_error(err, RL_EMEMORY, "out of memory checking %s", c->dir);
    if (c->cfg.quant.method &&
        !(c->quant = calloc((size_t)c->cfg.num_layers * 7, sizeof(*c->quant)))) {
        free(k.seen);
        return rl_error(err, RL_EMEMORY, "out of memory checking %s", c->dir);
    }
    int rc = rl_model_expected_tensors(&c->cfg, ck_check_quant_sizes, &k) ||
                     rl_model_expected_tensors(&c->cfg, ck_check_tensor, &k) ? -1 : 0;
    for (int i = 0; rc == 0 && i < c->n_entries; i++) {
        if (k.seen[i] || ck_is_ignorable(c, c->entries[i].t->name)) continue;
        rc = rl_error(err, RL_EMODEL,
                      "%s/%s holds tensor \"%s\", which a %s model with this config.json "
                      "does not have (more layers than num_hidden_layers, or another "
                      "architecture's weights): the weights and config.json do not match. "
                      "Download them together from one repository.",
                      c->dir, c->file_names[c->entries[i].file], c->entries[i].t->name,
                      c->cfg.architecture);
    }
    if (rc == 0 && k.first) c->cfg.torch_dtype = k.first->t->dtype;
    free(k.seen);
    if (c->n_quant) qsort(c->quant, (size_t)c->n_quant, sizeof(*c->quant), ck_cmp_quant);
    return rc;
}

/* Every tensor the index places in a shard must be there. */
static int ck_check_index(rlCheckpoint *c, json_t *map, rlError *err) {
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        const rlCkEntry *e = ck_find(c, name);
        if (!e && ck_is_ignorable(c, name)) continue;
        if (!e || strcmp(c->file_names[e->file], json_string_value(v)) != 0)
            return rl_error(err, RL_EMODEL,
                            "%s/" RL_CK_INDEX " places tensor \"%s\" in %s, but %s: the index "
                            "and the shards come from different downloads. Download the model "
                            "again.", c->dir, name, json_string_value(v),
                            e ? "another shard holds it" : "no shard holds it");
    }
    return 0;
}

rlCheckpoint *checkpoint_open(const char *dir, rlModelConfig *cfg, rlError *err) {
    if (ck_check_dir(dir, err)) return NULL;
    rlCheckpoint *c = calloc(1, sizeof(*c));
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        rl_error(err, RL_EMEMORY, "out of memory opening %s", dir);
        return NULL;
    }
    json_t *map = NULL;
    char path[RL_CK_PATH];
    int rc = modelcfg_load(dir, &c->cfg, err);
    /* As transformers does: one file wins over an index. */
    if (rc == 0) rc = ck_join(path, dir, RL_CK_SINGLE, err);
    if (rc == 0) {
        if (ck_exists(path)) rc = ck_add_file(c, RL_CK_SINGLE, err);
        else if (ck_join(path, dir, RL_CK_INDEX, err) == 0 && ck_exists(path))
            rc = ck_read_index(c, path, &map, err);
        else rc = ck_explain_no_weights(dir, err);
    }
    if (rc == 0) rc = ck_open_files(c, err);
    if (rc == 0) rc = ck_check_tensors(c, err);
    if (rc == 0 && map) rc = ck_check_index(c, map, err);
    json_decref(map);
    if (rc) {
        checkpoint_close(c);
        return NULL;
    }
    *cfg = c->cfg;
    return c;
}

/* A quantized layer's weight: the block asked for, dequantized to fp32, or
 * in the plain quantized form when the caller takes it. */
static int ck_lookup_quant(rlCheckpoint *c, const rlCkQuant *cq, rlTensorView *out,
                           rlError *err) {
    const rlQuantLinear *w = &cq->w;
    int64_t r0 = out->nr ? out->r0 : 0, nr = out->nr ? out->nr : w->n;
    int64_t c0 = out->nr ? out->c0 : 0, nc = out->nr ? out->nc : w->k;
    if (out->want_quant) {
        rlTensorView v = {.ndim = 2, .shape = {w->n, w->k}, .r0 = r0, .nr = nr, .c0 = c0,
                          .nc = nc, .want_quant = 1, .quantized = 1};
        if (quant_plain(w, r0, nr, c0, nc, &v.wq, &v.input_scale, &v.owned, err))
            return rl_error_wrap(err, "loading %s", c->dir);
        *out = v;
        return 0;
    }
    float *block = malloc((size_t)(nr * nc > 0 ? nr * nc : 1) * sizeof(float));
    if (!block)
        return rl_error(err, RL_EMEMORY, "out of host memory dequantizing %s (%lld x %lld)",
                        cq->name, (long long)nr, (long long)nc);
    if (quant_dequant(w, r0, nr, c0, nc, block, err)) {
        free(block);
        return rl_error_wrap(err, "loading %s", c->dir);
    }
    *out = (rlTensorView){.dtype = RL_F32, .ndim = 2, .shape = {w->n, w->k}, .data = block,
                          .r0 = r0, .nr = nr, .c0 = c0, .nc = nc, .owned = block};
    return 0;
}

int checkpoint_lookup(void *ctx, const char *name, rlTensorView *out, rlError *err) {
    rlCheckpoint *c = ctx;
    if (c->n_quant) {
        rlCkQuant key = {.name = (char *)name};
        const rlCkQuant *cq = bsearch(&key, c->quant, (size_t)c->n_quant, sizeof(key), ck_cmp_quant);
        if (cq) return ck_lookup_quant(c, cq, out, err);
    }
    const rlCkEntry *e = ck_find(c, name);
    if (!e)
        return rl_error(err, RL_EMODEL, "tensor \"%s\" is not in the checkpoint %s", name,
                        c->dir);
    if (e->t->ndim < 1 || e->t->ndim > 2)
        return rl_error(err, RL_EMODEL, "tensor \"%s\" in %s has %d dimensions; model weights "
                        "have 1 or 2", name, c->dir, e->t->ndim);
    out->dtype = e->t->dtype;
    out->ndim = e->t->ndim;
    out->shape[0] = e->t->shape[0];
    out->shape[1] = e->t->ndim == 2 ? e->t->shape[1] : 0;
    out->data = e->t->data;
    out->owned = NULL;
    return 0;
}

void checkpoint_close(rlCheckpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_files; i++) {
        if (c->files) safetensors_close(&c->files[i]);
        free(c->file_names[i]);
    }
    for (int i = 0; i < c->n_quant; i++) free(c->quant[i].name);
    free(c->quant);
    free(c->files);
    free(c->file_names);
    free(c->entries);
    free(c->dir);
    free(c);
}
