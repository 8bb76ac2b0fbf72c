/* chat.c: finding a model's chat template and rendering conversations
 * with it (see chat.h).  The variables are the ones transformers passes:
 * messages, tools, documents, add_generation_prompt, the tokenizer's
 * special tokens (bos_token, eos_token, ...) and the caller's extra
 * kwargs, which win over the special tokens as they do there; and
 * continue_final_message's cut of the rendered text, as transformers makes
 * it after rendering. */
#include "worker/chat/chat.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja.h"
#include "worker/chat/jinja_impl.h"

/* Qwen2.5-Instruct's chat_template: the fallback for models without one. */
static const char QWEN25_TEMPLATE[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

struct rlChat {
    jjTemplate *def;            /* the template */
    jjTemplate *tool_use;       /* a named "tool_use" template, or NULL */
    json_t *special;            /* bos_token, eos_token, ... as strings */
    rlError refused;            /* the model's template, refused at load */
    char describe[4400];
};

static char *read_file(const char *path, size_t *len, rlError *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        rl_error(err, RL_EMODEL, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0, k;
    do {
        if (n == cap) {
            char *nb = cap < (64u << 20) ? realloc(buf, cap ? cap * 2 : 65536) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                rl_error(err, RL_EMODEL, "%s: too large or out of memory", path);
                return NULL;
            }
            buf = nb;
            cap = cap ? cap * 2 : 65536;
        }
        k = fread(buf + n, 1, cap - n, f);
        n += k;
    } while (k > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        rl_error(err, RL_EMODEL, "reading %s failed", path);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Special tokens are strings, or AddedToken objects {"content": ...}. */
static int read_special(rlChat *ch, const json_t *cfg, const char *path, rlError *err) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                                       "cls_token", "mask_token", NULL};
    if (!(ch->special = json_object())) return rl_error(err, RL_EMEMORY, "out of memory");
    for (const char *const *k = keys; *k; k++) {
        const json_t *v = json_object_get(cfg, *k);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v))
            return rl_error(err, RL_EMODEL, "%s: \"%s\" must be a string or {\"content\": string}", path, *k);
        if (json_object_set(ch->special, *k, (json_t *)v)) return rl_error(err, RL_EMEMORY, "out of memory");
    }
    const json_t *extra = json_object_get(cfg, "additional_special_tokens");
    if (json_is_array(extra)) {
        json_t *list = json_array();
        size_t i;
        const json_t *v;
        json_array_foreach(extra, i, v) {
            const json_t *s = json_is_object(v) ? json_object_get(v, "content") : v;
            if (json_is_string(s)) json_array_append(list, (json_t *)s);
        }
        if (!list || json_object_set_new(ch->special, "additional_special_tokens", list))
            return rl_error(err, RL_EMEMORY, "out of memory");
    }
    return 0;
}

/* Parse one template source; a refusal is kept in ch->refused. */
static jjTemplate *load_template(rlChat *ch, const char *src, size_t len, const char *where) {
    rlError e = {0};
    jjTemplate *t = jinja_load(src, len, where, &e);
    if (!t && ch->refused.code == RL_OK) {
        ch->refused = e;
        rl_error_wrap(&ch->refused, "the model's chat template cannot be used (messages jobs are refused; "
                                    "send prompt or prompt_ids)");
        ch->refused.code = RL_EINPUT;
    }
    return t;
}

static int load_named(rlChat *ch, const json_t *list, const char *path, rlError *err) {
    size_t i;
    const json_t *item;
    json_array_foreach(list, i, item) {
        const char *name = json_string_value(json_object_get(item, "name"));
        const json_t *src = json_object_get(item, "template");
        if (!name || !json_is_string(src))
            return rl_error(err, RL_EMODEL, "%s: chat_template[%zu] must be {\"name\": string, \"template\": "
                            "string}", path, i);
        if (strcmp(name, "default") && strcmp(name, "tool_use")) continue;
        char where[4200];
        snprintf(where, sizeof(where), "%.4096s chat_template '%.40s'", path, name);
        jjTemplate *t = load_template(ch, json_string_value(src), json_string_length(src), where);
        jjTemplate **slot = strcmp(name, "default") ? &ch->tool_use : &ch->def;
        jinja_free(*slot);
        *slot = t;
    }
    if (!ch->def && ch->refused.code == RL_OK)
        return rl_error(err, RL_EMODEL, "%s: chat_template lists no template named \"default\"", path);
    return 0;
}

rlChat *chat_open(const char *dir, rlError *err) {
    rlChat *ch = calloc(1, sizeof(*ch));
    char cfg_path[4096], jinja_path[4096];
    json_t *cfg = NULL;
    char *src = NULL;
    size_t len = 0;
    if (!ch) {
        rl_error(err, RL_EMEMORY, "out of memory");
        return NULL;
    }
    snprintf(cfg_path, sizeof(cfg_path), "%s/tokenizer_config.json", dir);
    snprintf(jinja_path, sizeof(jinja_path), "%s/chat_template.jinja", dir);
    FILE *probe = fopen(cfg_path, "rb");
    if (probe) {
        fclose(probe);
        json_error_t je;
        if (!(cfg = json_load_file(cfg_path, 0, &je)) || !json_is_object(cfg)) {
            if (cfg)
                rl_error(err, RL_EMODEL, "%s: not a JSON object; download tokenizer_config.json "
                         "again from the model's repository", cfg_path);
            else
                rl_error(err, RL_EMODEL, "%s: not valid JSON (%s, line %d, column %d); download "
                         "tokenizer_config.json again from the model's repository", cfg_path,
                         je.text, je.line, je.column);
            goto fail;
        }
        if (read_special(ch, cfg, cfg_path, err)) goto fail;
    } else if (!(ch->special = json_object())) {
        rl_error(err, RL_EMEMORY, "out of memory");
        goto fail;
    }
    /* transformers prefers chat_template.jinja over tokenizer_config.json. */
    if ((probe = fopen(jinja_path, "rb"))) {
        fclose(probe);
        if (!(src = read_file(jinja_path, &len, err))) goto fail;
        ch->def = load_template(ch, src, len, jinja_path);
        snprintf(ch->describe, sizeof(ch->describe), "messages are rendered with %s", jinja_path);
    } else if (cfg && json_object_get(cfg, "chat_template") && !json_is_null(json_object_get(cfg, "chat_template"))) {
        const json_t *t = json_object_get(cfg, "chat_template");
        if (json_is_string(t)) {
            char where[4200];
            snprintf(where, sizeof(where), "%s chat_template", cfg_path);
            ch->def = load_template(ch, json_string_value(t), json_string_length(t), where);
        } else if (json_is_array(t)) {
            if (load_named(ch, t, cfg_path, err)) goto fail;
        } else {
            rl_error(err, RL_EMODEL, "%s: chat_template must be a string or a list of named templates", cfg_path);
            goto fail;
        }
        snprintf(ch->describe, sizeof(ch->describe), "messages are rendered with the chat_template of %s", cfg_path);
    } else {
        ch->def = load_template(ch, QWEN25_TEMPLATE, sizeof(QWEN25_TEMPLATE) - 1, "built-in Qwen2.5 chat template");
        if (!ch->def) {
            *err = ch->refused;
            goto fail;
        }
        snprintf(ch->describe, sizeof(ch->describe),
                 "%s has no chat template (chat_template.jinja, or chat_template in tokenizer_config.json): "
                 "messages are rendered with the built-in Qwen2.5 ChatML template", dir);
    }
    if (ch->refused.code != RL_OK) snprintf(ch->describe, sizeof(ch->describe), "warning: %.2048s", ch->refused.msg);
    free(src);
    json_decref(cfg);
    return ch;
fail:
    free(src);
    json_decref(cfg);
    chat_free(ch);
    return NULL;
}

void chat_free(rlChat *ch) {
    if (!ch) return;
    jinja_free(ch->def);
    jinja_free(ch->tool_use);
    json_decref(ch->special);
    free(ch);
}

const char *chat_describe(const rlChat *ch) {
    return ch->describe;
}

const rlError *chat_error(const rlChat *ch) {
    return ch->refused.code != RL_OK ? &ch->refused : NULL;
}

int chat_render(const rlChat *ch, const json_t *messages, const json_t *tools, int add_generation_prompt,
                const json_t *kwargs, char **text, size_t *len, rlError *err) {
    *text = NULL;
    if (tools && json_is_null(tools)) tools = NULL;
    if (ch->refused.code != RL_OK) {
        *err = ch->refused;
        return -1;
    }
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return rl_error(err, RL_EINPUT,
                        "\"messages\" must be a non-empty array of message objects {\"role\", \"content\"}");
    json_t *vars = json_copy(ch->special);
    if (!vars || (kwargs && json_object_update(vars, (json_t *)kwargs)) ||
        json_object_set(vars, "messages", (json_t *)messages) ||
        json_object_set_new(vars, "tools", tools ? json_incref((json_t *)tools) : json_null()) ||
        json_object_set_new(vars, "documents", json_null()) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt))) {
        json_decref(vars);
        return rl_error(err, RL_EMEMORY, "out of memory");
    }
    const jjTemplate *t = tools && ch->tool_use ? ch->tool_use : ch->def;
    int rc = jinja_render(t, vars, NULL, text, len, err);
    json_decref(vars);
    return rc;
}

/* Python's str.strip() bounds of s[0..n): *b .. *e without the whitespace
 * (str.isspace) at either end. */
static void chat_strip(const char *s, size_t n, size_t *b, size_t *e) {
    int32_t cp;
    size_t i = 0, k;
    while (i < n && (k = jj_utf8_decode(s + i, n - i, &cp)) && jj_isspace(cp)) i += k;
    size_t end = i, j = i;
    while (j < n) {   /* the end of the last character that is not whitespace */
        k = jj_utf8_decode(s + j, n - j, &cp);
        if (!k) break;
        j += k;
        if (!jj_isspace(cp)) end = j;
    }
    *b = i, *e = end;
}

int chat_continue_final(const json_t *messages, char *text, size_t *len, rlError *err) {
    const json_t *content = json_object_get(json_array_get(messages, json_array_size(messages) - 1),
                                            "content");
    if (json_is_array(content)) {   /* the last part with a text, as transformers looks */
        const json_t *part = NULL;
        for (size_t i = json_array_size(content); i-- > 0 && !part;)
            if (json_object_get(json_array_get(content, i), "text")) part = json_array_get(content, i);
        content = json_object_get(part, "text");
    }
    if (!json_is_string(content))
        return rl_error(err, RL_EINPUT, "continue_final_message is set, but the final message has "
                        "no text to continue");
    const char *m = json_string_value(content);
    size_t n = json_string_length(content), b, e;
    chat_strip(m, n, &b, &e);
    /* The last place the stripped message stands in the text; then the cut
     * keeps the message's trailing whitespace where the template kept it. */
    const char *at = NULL;
    for (size_t i = *len >= e - b ? *len - (e - b) + 1 : 0; i-- > 0;)
        if (!memcmp(text + i, m + b, e - b)) {
            at = text + i;
            break;
        }
    if (!at)
        return rl_error(err, RL_EINPUT, "continue_final_message is set, but the chat template "
                        "does not render the final message's text, so it cannot be continued");
    size_t whole = n - b;   /* the message without its leading whitespace */
    size_t cut = (size_t)(at - text) + e - b;
    if ((size_t)(at - text) + whole <= *len && !memcmp(at, m + b, whole)) cut = (size_t)(at - text) + whole;
    *len = cut;
    text[cut] = '\0';
    return 0;
}
