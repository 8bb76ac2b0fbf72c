/* doctor_model.c: a model directory checked file by file with the loader
 * (modelcfg.c, safetensors.c, checkpoint.c), so every problem the worker
 * would stop on at start shows here first, each with the loader's own
 * message; plus the index's declared size, the tokenizer and the chat
 * template (loaded by their own loaders), and SHA-256 checksums against a
 * manifest. */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "worker/chat/chat.h"
#include "worker/model/checkpoint.h"
#include "worker/doctor/doctor.h"
#include "worker/model/modelcfg.h"
#include "worker/model/safetensors.h"
#include "worker/lib/sha256.h"
#include "worker/tokenizer/tokenizer.h"

/* "3.2 MiB", "14.19 GiB": sizes from a few KiB (test models) to 150 GiB. */
static const char *model_size(size_t b, char buf[32]) {
    if (b >= (size_t)1 << 30) snprintf(buf, 32, "%.2f GiB", b / 1073741824.0);
    else if (b >= (size_t)1 << 20) snprintf(buf, 32, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, 32, "%.1f KiB", b / 1024.0);
    return buf;
}

static int model_has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int model_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The directory's *.safetensors names, sorted; NULL-terminated. */
static char **model_list(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!model_has_suffix(e->d_name, ".safetensors")) continue;
        char **grown = realloc(names, (size_t)(*n + 2) * sizeof(*names));
        if (!grown) break;
        names = grown;
        if (!(names[*n] = strdup(e->d_name))) break;
        names[++*n] = NULL;
    }
    closedir(d);
    if (names) qsort(names, (size_t)*n, sizeof(*names), model_cmp);
    return names;
}

static void model_list_free(char **names) {
    for (char **p = names; p && *p; p++) free(*p);
    free(names);
}

/* Each weight file opened alone: the header checked against the file's size. */
static size_t model_check_files(rlDoctor *d, const char *dir, char **names, int n) {
    size_t tensor_bytes = 0;
    for (int i = 0; i < n; i++) {
        char path[4096], topic[300];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        snprintf(topic, sizeof(topic), "file %s", names[i]);
        rlSafetensors st;
        rlError err = {0};
        if (safetensors_open(&st, path, &err)) {
            doctor_line(d, RL_DOC_FAIL, err.code, topic, "%s", err.msg);
            continue;
        }
        size_t bytes = 0;
        for (int t = 0; t < st.n_tensors; t++) bytes += st.tensors[t].nbytes;
        tensor_bytes += bytes;
        char size[32];
        doctor_line(d, RL_DOC_OK, 0, topic, "%d tensors, %s, header consistent with the file's "
                    "size", st.n_tensors, model_size(bytes, size));
        safetensors_close(&st);
    }
    return tensor_bytes;
}

/* The index names files that exist, and its declared total matches them. */
static void model_check_index(rlDoctor *d, const char *dir, char **names, int n,
                              size_t tensor_bytes) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return; /* absent or broken: checkpoint_open's line says which */
    json_t *wm = json_object_get(root, "weight_map");
    json_t *total = json_object_get(json_object_get(root, "metadata"), "total_size");
    const char *key;
    json_t *v;
    for (int i = 0; i < n; i++) {
        int named = 0;
        json_object_foreach(wm, key, v) if (json_is_string(v) &&
                                            !strcmp(json_string_value(v), names[i])) {
            named = 1;
            break;
        }
        if (!named && strcmp(names[i], "model.safetensors"))
            doctor_line(d, RL_DOC_WARN, 0, "model index",
                        "%s is in the directory but the index names none of its tensors, so it "
                        "is ignored; remove it if it is left from another download", names[i]);
    }
    if (json_is_integer(total)) {
        size_t want = (size_t)json_integer_value(total);
        if (want != tensor_bytes)
            doctor_line(d, RL_DOC_WARN, 0, "model index",
                        "metadata.total_size says %zu bytes of tensors but the files hold %zu; "
                        "a shard may come from another version of the model: download the "
                        "repository again", want, tensor_bytes);
        else
            doctor_line(d, RL_DOC_OK, 0, "model index",
                        "total_size %zu bytes matches the shards", want);
    }
    json_decref(root);
}

static void model_check_tokenizer(rlDoctor *d, const char *dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        doctor_line(d, RL_DOC_WARN, 0, "tokenizer",
                    "%s is missing: only prompts given as token ids will work; download "
                    "tokenizer.json from the model's repository", path);
        return;
    }
    rlError err = {0};
    rlTokenizer *tok = tokenizer_load(path, &err);
    if (!tok) {
        doctor_line(d, RL_DOC_FAIL, err.code, "tokenizer", "%s", err.msg);
        return;
    }
    char size[32];
    doctor_line(d, RL_DOC_OK, 0, "tokenizer", "tokenizer.json loads: %d token ids (%s)",
                tokenizer_vocab_size(tok), model_size((size_t)sb.st_size, size));
    tokenizer_free(tok);
}

/* The chat template a start loads beside the tokenizer: a malformed
 * tokenizer_config.json or chat_template stops it; a template that uses
 * what the interpreter lacks loads, and messages jobs are then refused. */
static void model_check_chat(rlDoctor *d, const char *dir) {
    rlError err = {0};
    rlChat *ch = chat_open(dir, &err);
    if (!ch) {
        doctor_line(d, RL_DOC_FAIL, err.code, "chat template", "%s", err.msg);
        return;
    }
    const rlError *refused = chat_error(ch);
    if (refused)
        doctor_line(d, RL_DOC_WARN, 0, "chat template",
                    "%s: jobs with messages will be refused; prompts and token ids work",
                    refused->msg);
    else
        doctor_line(d, RL_DOC_OK, 0, "chat template", "%s", chat_describe(ch));
    chat_free(ch);
}

/* The manifest as name -> hex pairs: a JSON object of hex strings, the hub
 * API's {"siblings": [{"rfilename", "lfs": {"sha256"}}]}, or sha256sum
 * lines.  Returns a JSON object (name -> hex) or NULL with err filled. */
static json_t *model_read_manifest(const char *path, rlError *err) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr), *map = json_object();
    if (root && json_is_array(json_object_get(root, "siblings"))) {
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(root, "siblings"), i, s) {
            const char *name = json_string_value(json_object_get(s, "rfilename"));
            json_t *sha = json_object_get(json_object_get(s, "lfs"), "sha256");
            if (name && json_is_string(sha)) json_object_set(map, name, sha);
        }
    } else if (root && json_is_object(root)) {
        const char *name;
        json_t *v;
        json_object_foreach(root, name, v) if (json_is_string(v)) json_object_set(map, name, v);
    } else if (!root) {
        FILE *f = fopen(path, "r");
        char line[4096];
        while (f && fgets(line, sizeof(line), f)) {
            char hex[65], name[4000];
            if (sscanf(line, "%64[0-9a-fA-F] %3999[^\n]", hex, name) == 2 && strlen(hex) == 64)
                json_object_set_new(map, name[0] == '*' ? name + 1 : name, json_string(hex));
        }
        if (f) fclose(f);
        else {
            json_decref(map);
            rl_error(err, RL_EIO, "--verify %s cannot be opened: check the path", path);
            return NULL;
        }
    }
    json_decref(root);
    if (json_object_size(map) == 0) {
        json_decref(map);
        rl_error(err, RL_EINPUT,
                 "--verify %s holds no checksums: give a JSON object of file name -> SHA-256 "
                 "hex, the hub's model API answer (with \"siblings\"), or `sha256sum` lines",
                 path);
        return NULL;
    }
    return map;
}

static void model_check_manifest(rlDoctor *d, const char *dir, const char *manifest,
                                 char **names, int n) {
    rlError err = {0};
    json_t *map = model_read_manifest(manifest, &err);
    if (!map) {
        doctor_line(d, RL_DOC_FAIL, err.code, "checksums", "%s", err.msg);
        return;
    }
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        char path[4096], topic[300], hex[65];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        snprintf(topic, sizeof(topic), "sha256 %s", name);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            /* The hub lists every file of the repository; only weights matter here. */
            if (model_has_suffix(name, ".safetensors"))
                doctor_line(d, RL_DOC_FAIL, RL_EMODEL, topic,
                            "listed in the manifest but missing from %s: download it", dir);
            continue;
        }
        if (sha256_file(path, hex, &err)) {
            doctor_line(d, RL_DOC_FAIL, err.code, topic, "%s", err.msg);
            continue;
        }
        if (strcasecmp(hex, json_string_value(v)))
            doctor_line(d, RL_DOC_FAIL, RL_EMODEL, topic,
                        "is %s but the manifest says %s: the file is damaged or from another "
                        "version; download it again", hex, json_string_value(v));
        else
            doctor_line(d, RL_DOC_OK, 0, topic, "matches");
    }
    for (int i = 0; i < n; i++)
        if (!json_object_get(map, names[i]))
            doctor_line(d, RL_DOC_WARN, 0, "checksums",
                        "%s is not in the manifest, so it was not verified", names[i]);
    json_decref(map);
}

void doctor_check_model(rlDoctor *d, const char *dir, const char *manifest) {
    rlModelConfig cfg;
    rlError err = {0};
    if (checkpoint_read_config(dir, &cfg, &err)) {
        doctor_line(d, RL_DOC_FAIL, err.code, "model config", "%s", err.msg);
        return;
    }
    char family[160], quant[64] = "";
    rl_config_describe(&cfg, family, sizeof(family));
    if (cfg.quant.method) rl_quant_name(&cfg.quant, quant, sizeof(quant));
    doctor_line(d, RL_DOC_OK, 0, "model config",
                "%s, %d layers, hidden %d, %d heads / %d KV heads, vocab %d, %s%s%s", family,
                cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size,
                rl_dtype_name(cfg.torch_dtype), quant[0] ? ", quantized " : "", quant);
    /* The sampling defaults a start reads (--generation-config auto, the
     * default) stop it when out of range. */
    rlSamplingDefaults defaults;
    if (modelcfg_sampling_defaults(dir, &defaults, &err))
        doctor_line(d, RL_DOC_FAIL, err.code, "generation config", "%s", err.msg);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return; /* a config file alone */

    int n;
    char **names = model_list(dir, &n);
    size_t bytes = model_check_files(d, dir, names, n);
    model_check_index(d, dir, names, n, bytes);
    rlCheckpoint *c = checkpoint_open(dir, &cfg, &err);
    if (!c)
        doctor_line(d, RL_DOC_FAIL, err.code, "model tensors", "%s", err.msg);
    else {
        char size[32];
        doctor_line(d, RL_DOC_OK, 0, "model tensors",
                    "every tensor present with the shape config.json implies (%d file%s, %s, "
                    "stored as %s)", n, n == 1 ? "" : "s", model_size(bytes, size),
                    rl_dtype_name(cfg.torch_dtype));
    }
    checkpoint_close(c);
    model_check_tokenizer(d, dir);
    model_check_chat(d, dir);
    if (manifest) model_check_manifest(d, dir, manifest, names, n);
    model_list_free(names);
}
