/* fuzz_jinja.c: libFuzzer target for the chat-template interpreter
 * (`make fuzz`): a model directory's chat_template is outside input, read
 * at every start and run for every `messages` job.
 *
 * The input is a template's source.  Loading must either give a template
 * or an error with a message; rendering it over a fixed conversation (all
 * roles, a tool call, tools, the special tokens) must either give text of
 * the length it reports or an error with a message, within the limits a
 * worker renders under (lowered here so that one input stays fast). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "worker/chat/jinja.h"

static json_t *vars;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    vars = json_loads(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi \\u00e9\"}]},"
        " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"hm\","
        "  \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
        "  \"arguments\": {\"a\": [1, 2.5, null, true]}}}]},"
        " {\"role\": \"tool\", \"content\": \"42\", \"tool_call_id\": \"c1\"},"
        " {\"role\": \"user\", \"content\": \"And?\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
        "  \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}}}],"
        " \"documents\": null, \"add_generation_prompt\": true, \"enable_thinking\": false,"
        " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
        0, NULL);
    if (!vars) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    rlError err = {0};
    jjTemplate *t = jinja_load((const char *)data, size, "chat_template", &err);
    if (!t) {
        if (err.code == RL_OK || !err.msg[0]) abort();
        return 0;
    }
    jjLimits lim;
    jinja_limits_default(&lim);
    lim.max_steps = 100000;
    lim.max_output = 1 << 20;
    char *out = NULL;
    size_t len = 0;
    if (jinja_render(t, vars, &lim, &out, &len, &err) == 0) {
        if (!out || strlen(out) > len) abort();   /* NUL-terminated; a NUL may sit inside */
    } else if (err.code == RL_OK || !err.msg[0]) {
        abort();
    }
    free(out);
    jinja_free(t);
    return 0;
}
