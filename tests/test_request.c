/* test_request.c: worker/request/request, one request map validated as
 * worker/redis/PROTOCOL.md says: every field, its type and range. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "worker/request/request.h"

/* Parse text; return the protocol code on failure, NULL on success. */
static const char *parse(const char *text, rlRequest *r, rlError *err) {
    json_error_t jerr;
    json_t *obj = json_loads(text, JSON_ALLOW_NUL, &jerr);
    assert_non_null(obj);
    request_init(r);
    const char *code = NULL;
    int rc = request_parse(r, obj, &code, err);
    json_decref(obj);
    return rc ? code : NULL;
}

static void test_valid(void **state) {
    (void)state;
    rlRequest r;
    rlError err;
    assert_null(parse("{\"id\":\"a\",\"prompt_ids\":[1,2,3],\"max_tokens\":0,\"temperature\":0,"
                      "\"top_p\":0.5,\"top_k\":4,\"min_p\":0.1,\"seed\":-1,\"n\":2,\"stop\":[\"x\"],"
                      "\"stop_token_ids\":[7],\"ignore_eos\":true,\"logprobs\":null,"
                      "\"prompt_logprobs\":3,\"stream\":false,\"reply_to\":\"k\",\"priority\":-2,"
                      "\"deadline_ms\":5}", &r, &err));
    assert_string_equal(r.id, "a");
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.max_tokens, 0);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.logprobs, -1);
    assert_int_equal(r.prompt_logprobs, 3);
    assert_true(r.has_seed);
    assert_int_equal(r.seed, UINT64_MAX);
    assert_int_equal(r.priority, -2);
    assert_string_equal(r.stop[0], "x");
    request_free(&r);
    /* a number with no fraction is an integer, as vLLM's request models take it */
    assert_null(parse("{\"id\":\"a\",\"prompt_ids\":[1],\"max_tokens\":2.0,\"n\":3e0,"
                      "\"logprobs\":1.0}", &r, &err));
    assert_int_equal(r.max_tokens, 2);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.logprobs, 1);
    request_free(&r);
    assert_null(parse("{\"id\":\"b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r, &err));
    assert_int_equal(json_array_size(r.messages), 1);
    assert_int_equal(r.max_tokens, 256);
    assert_float_equal(r.temperature, 1.0, 0);
    assert_int_equal(r.add_generation_prompt, 1);
    assert_null(r.tools);
    request_free(&r);
    /* continue_final_message turns add_generation_prompt off */
    assert_null(parse("{\"id\":\"b\",\"messages\":[{\"role\":\"assistant\",\"content\":\"hi\"}],"
                      "\"continue_final_message\":true}", &r, &err));
    assert_int_equal(r.continue_final_message, 1);
    assert_int_equal(r.add_generation_prompt, 0);
    request_free(&r);
    /* A conversation with tools, tool calls (arguments as an object and as
     * a JSON string), a tool result and reasoning, kept as sent, except
     * that, as vLLM does, string arguments are parsed into the object
     * templates expect, absent or null ones become {}, an empty
     * tool_calls list is dropped and null content is "". */
    assert_null(parse("{\"id\":\"c\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                      "{\"role\":\"user\",\"content\":\"weather?\",\"name\":\"ann\"},"
                      "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hmm\",\"tool_calls\":["
                      "{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":{\"city\":\"Oslo\"}}},"
                      "{\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\": \\\"Rome\\\"}\"}}]},"
                      "{\"role\":\"tool\",\"content\":\"5C\",\"tool_call_id\":\"1\"},"
                      "{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"w\"}}]},"
                      "{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":[]},"
                      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"w\","
                      "\"arguments\":\"{\\\"a\\\":[1,{\\\"b\\\":null}]}\"}},{\"function\":{\"name\":\"w\",\"arguments\":null}}]}],"
                      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{}}}],"
                      "\"chat_template_kwargs\":{\"enable_thinking\":false},\"add_generation_prompt\":false,"
                      "\"tool_choice\":\"none\"}",
                      &r, &err));
    assert_int_equal(json_array_size(r.messages), 7);
    assert_int_equal(json_array_size(r.tools), 1);
    static const struct { size_t msg, call; const char *want; } calls[] = {
        {2, 0, "{\"city\": \"Oslo\"}"}, {2, 1, "{\"city\": \"Rome\"}"}, {4, 0, "{}"},
        {6, 0, "{\"a\": [1, {\"b\": null}]}"}, {6, 1, "{}"},
    };
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        const json_t *m = json_array_get(r.messages, calls[i].msg);
        const json_t *tc = json_array_get(json_object_get(m, "tool_calls"), calls[i].call);
        char *args = json_dumps(json_object_get(json_object_get(tc, "function"), "arguments"), JSON_ENCODE_ANY);
        assert_string_equal(args, calls[i].want);
        free(args);
    }
    assert_null(json_object_get(json_array_get(r.messages, 5), "tool_calls"));
    /* Null or absent content is "", as vLLM gives it to the template. */
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 2), "content")), "");
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 4), "content")), "");
    assert_true(json_is_false(json_object_get(r.chat_template_kwargs, "enable_thinking")));
    assert_int_equal(r.add_generation_prompt, 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 2), "reasoning_content")), "hmm");
    request_free(&r);
}

static void test_invalid(void **state) {
    (void)state;
    static const struct { const char *json, *code, *field; } cases[] = {
        {"{\"prompt_ids\":[1]}", "invalid_request", "'id'"},
        {"{\"id\":\"\",\"prompt_ids\":[1]}", "invalid_request", "'id'"},
        {"{\"id\":5,\"prompt_ids\":[1]}", "invalid_request", "'id'"},
        {"{\"id\":\"a\"}", "invalid_request", "exactly one"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"prompt_ids\":[1]}", "invalid_request", "exactly one"},
        {"{\"id\":\"a\",\"prompt_ids\":[]}", "invalid_request", "'prompt_ids'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1,-2]}", "invalid_request", "'prompt_ids'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"max_tokens\":-1}", "invalid_request", "'max_tokens'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"max_tokens\":1.5}", "invalid_request", "'max_tokens'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"seed\":9.3e18}", "invalid_request", "'seed'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"temperature\":-0.1}", "invalid_request", "'temperature'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"top_p\":0}", "invalid_request", "'top_p'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"top_p\":1.01}", "invalid_request", "'top_p'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"min_p\":1}", "invalid_request", "'min_p'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"top_k\":-2}", "invalid_request", "'top_k'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"n\":0}", "invalid_request", "'n'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"logprobs\":21}", "invalid_request", "'logprobs'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"stream\":1}", "invalid_request", "'stream'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"stop\":5}", "invalid_request", "'stop'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"stop\":[\"\"]}", "invalid_request", "'stop[0]'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"temprature\":0}", "invalid_request",
         "'temprature' (did you mean 'temperature'?)"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"enable_thinking\":false}",
         "invalid_request", "goes in 'chat_template_kwargs'"},
        {"{\"id\":\"a\",\"prompt_ids\":[1],\"xyzzy_plugh\":0}", "invalid_request",
         "the request fields are id, prompt, messages"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\"}]}", "invalid_request", "messages[0]"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"nme\":\"y\"}]}",
         "invalid_request", "'nme'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"\",\"content\":\"x\"}]}", "invalid_request", "'role'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
         "invalid_request", "'messages[0].content[0]' must be a text part"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"reasoning_content\":1}]}",
         "invalid_request", "'messages[0].reasoning_content'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "invalid_request",
         "'messages[0].tool_calls'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\"}]}]}",
         "invalid_request", "messages[0].tool_calls[0]"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
         "\"arguments\":3}}]}]}", "invalid_request", "'arguments'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
         "\"arguments\":\"{city: 1}\"}}]}]}", "invalid_request",
         "'messages[0].tool_calls[0].function.arguments' is not valid JSON"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "invalid_request",
         "'tools'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\"}",
         "invalid_request", "'tool_choice' may only be \"none\": redlm has no tool-call parser"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"function\"}}",
         "invalid_request", "'tool_choice'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[1]}", "invalid_request",
         "'tools[0]'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":[]}",
         "invalid_request", "'chat_template_kwargs'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"chat_template_kwargs\":{\"tools\":[]}}", "invalid_request", "chat_template_kwargs.tools"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":1}",
         "invalid_request", "'add_generation_prompt'"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"tools\":[]}", "invalid_request", "'tools' applies to 'messages' only"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"continue_final_message\":true}", "invalid_request",
         "'continue_final_message' applies to 'messages' only"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":true,"
         "\"continue_final_message\":true}", "invalid_request", "cannot both be true"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "invalid_request",
         "NUL"},
        {"{\"id\":\"a\",\"prompt\":\"a\\u0000b\"}", "invalid_request", "NUL"},
        {"[1]", "invalid_request", "object"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rlRequest r;
        rlError err;
        const char *code = parse(cases[i].json, &r, &err);
        /* the event carries the code beside the message: not inside it again */
        if (!code || strcmp(code, cases[i].code) || !strstr(err.msg, cases[i].field) ||
            strstr(err.msg, code))
            fail_msg("case %zu %s: code %s, message %s", i, cases[i].json, code ? code : "none",
                     code ? err.msg : "");
        request_free(&r);
    }
}

static void test_long_id_and_bad_utf8(void **state) {
    (void)state;
    char id[300];
    memset(id, 'x', sizeof(id));
    id[257] = 0;
    json_t *obj = json_pack("{s:s, s:[i]}", "id", id, "prompt_ids", 1);
    rlRequest r;
    rlError err;
    const char *code;
    request_init(&r);
    assert_int_equal(request_parse(&r, obj, &code, &err), -1);
    assert_string_equal(code, "invalid_request");
    request_free(&r);
    json_decref(obj);
    obj = json_pack("{s:s, s:o}", "id", "a", "prompt", json_stringn_nocheck("\xff\xfe", 2));
    request_init(&r);
    assert_int_equal(request_parse(&r, obj, &code, &err), -1);
    assert_string_equal(code, "invalid_utf8");
    assert_non_null(strstr(err.msg, "'prompt'"));
    assert_null(strstr(err.msg, code));
    request_free(&r);
    json_decref(obj);
    /* Bad UTF-8 deep inside a tool's schema is found too. */
    obj = json_pack("{s:s, s:[{s:s, s:s}], s:[{s:{s:o}}]}", "id", "a", "messages", "role", "user", "content", "x",
                    "tools", "function", "description", json_stringn_nocheck("\xc3", 1));
    request_init(&r);
    assert_int_equal(request_parse(&r, obj, &code, &err), -1);
    assert_string_equal(code, "invalid_utf8");
    assert_non_null(strstr(err.msg, "'tools'"));
    request_free(&r);
    json_decref(obj);
}


/* The fields with OpenAI / vLLM names: what each reads into. */
static void test_openai_fields(void **state) {
    (void)state;
    rlRequest r;
    rlError err;
    assert_null(parse("{\"id\":\"a\",\"prompt_token_ids\":[4,5],\"stop\":\"x\",\"top_k\":-1,"
                      "\"logprobs\":true,\"top_logprobs\":3,\"max_completion_tokens\":7,"
                      "\"presence_penalty\":-2,\"frequency_penalty\":2,\"repetition_penalty\":1.3,"
                      "\"logit_bias\":{\"9\":-100,\"2\":100,\"5\":0.5},\"min_tokens\":2,"
                      "\"bad_words\":[\"foo\",\"a b\"],\"skip_special_tokens\":false,"
                      "\"include_stop_str_in_output\":true,\"model\":\"m\",\"user\":\"u\","
                      "\"metadata\":{\"k\":\"v\"},\"seed\":null,\"n\":2}", &r, &err));
    assert_int_equal(r.n_prompt_ids, 2);
    assert_int_equal(r.prompt_ids[1], 5);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "x");
    assert_int_equal(r.top_k, 0);
    assert_int_equal(r.logprobs, 3);
    assert_int_equal(r.max_tokens, 7);
    assert_float_equal(r.presence_penalty, -2, 0);
    assert_float_equal(r.frequency_penalty, 2, 0);
    assert_float_equal(r.repetition_penalty, 1.3f, 0);
    assert_int_equal(r.n_logit_bias, 3);   /* sorted by id */
    assert_int_equal(r.logit_bias[0].id, 2);
    assert_float_equal(r.logit_bias[0].bias, 100, 0);
    assert_int_equal(r.logit_bias[2].id, 9);
    assert_int_equal(r.min_tokens, 2);
    assert_int_equal(r.n_bad_words, 2);
    assert_string_equal(r.bad_words[1], "a b");
    assert_false(r.skip_special_tokens);
    assert_true(r.include_stop_str_in_output);
    assert_string_equal(r.model, "m");
    assert_string_equal(json_string_value(json_object_get(r.echo, "user")), "u");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.echo, "metadata"), "k")), "v");
    assert_false(r.has_seed);
    assert_int_equal(r.given, RL_GIVEN_TOP_K | RL_GIVEN_MAX_TOKENS | RL_GIVEN_REPETITION_PENALTY);
    request_free(&r);

    /* Defaults, logprobs as bool / int, max_tokens null, content parts. */
    assert_null(parse("{\"id\":\"b\",\"prompt\":\"x\",\"logprobs\":false,\"max_tokens\":null,"
                      "\"temperature\":0.5}", &r, &err));
    assert_int_equal(r.logprobs, -1);
    assert_int_equal(r.max_tokens, 256);
    assert_float_equal(r.repetition_penalty, 1, 0);
    assert_true(r.skip_special_tokens);   /* vLLM's default */
    assert_false(r.include_stop_str_in_output);
    assert_null(r.echo);
    assert_int_equal(r.given, RL_GIVEN_TEMPERATURE);
    request_free(&r);
    assert_null(parse("{\"id\":\"c\",\"prompt\":\"x\",\"logprobs\":true}", &r, &err));
    assert_int_equal(r.logprobs, 0);
    request_free(&r);
    /* min_tokens above the protocol's 256 without max_tokens: the engine's
     * default max_tokens (the model's, or the rest of the context) honours it */
    assert_null(parse("{\"id\":\"m\",\"prompt\":\"x\",\"min_tokens\":300}", &r, &err));
    assert_int_equal(r.min_tokens, 300);
    assert_int_equal(r.given & RL_GIVEN_MAX_TOKENS, 0);
    request_free(&r);
    assert_null(parse("{\"id\":\"d\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                      "\"text\",\"text\":\"one\"},{\"type\":\"text\",\"text\":\"two\"}]}]}", &r, &err));
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 0), "content")),
                        "one\ntwo");
    request_free(&r);
}

/* null is "not given" for every field but id, as the OpenAI API and vLLM
 * take it (`temperature=None` serialised by a client is a default, not an
 * error): the protocol's defaults, or the model's, fill them. */
/* metadata's limits are OpenAI's: characters, not bytes. */
static void test_metadata_characters(void **state) {
    (void)state;
    char text[4096], value[1200] = "", key[200] = "";
    for (int i = 0; i < 512; i++) strcat(value, "\xc3\xa9");   /* 512 x U+00E9: 1,024 bytes */
    for (int i = 0; i < 64; i++) strcat(key, "\xe4\xbd\xa0");   /* 64 x U+4F60: 192 bytes */
    rlRequest r;
    rlError err;
    snprintf(text, sizeof(text), "{\"id\":\"a\",\"prompt\":\"x\",\"metadata\":{\"%s\":\"%s\"}}", key, value);
    assert_null(parse(text, &r, &err));
    request_free(&r);
    snprintf(text, sizeof(text), "{\"id\":\"a\",\"prompt\":\"x\",\"metadata\":{\"k\":\"%sa\"}}", value);
    assert_string_equal(parse(text, &r, &err), "invalid_request");
    assert_non_null(strstr(err.msg, "512 characters"));
    request_free(&r);
}

static void test_null_is_default(void **state) {
    (void)state;
    rlRequest r, d;
    rlError err;
    assert_null(parse("{\"id\":\"a\",\"prompt\":\"x\",\"messages\":null,\"prompt_ids\":null,"
                      "\"prompt_token_ids\":null,\"max_tokens\":null,\"temperature\":null,"
                      "\"top_p\":null,\"top_k\":null,\"min_p\":null,\"seed\":null,\"n\":null,"
                      "\"stop\":null,\"stop_token_ids\":null,\"ignore_eos\":null,\"logprobs\":null,"
                      "\"prompt_logprobs\":null,\"stream\":null,\"reply_to\":null,\"priority\":null,"
                      "\"deadline_ms\":null,\"top_logprobs\":null,\"max_completion_tokens\":null,"
                      "\"presence_penalty\":null,\"frequency_penalty\":null,"
                      "\"repetition_penalty\":null,\"logit_bias\":null,\"min_tokens\":null,"
                      "\"bad_words\":null,\"skip_special_tokens\":null,"
                      "\"include_stop_str_in_output\":null,\"model\":null,\"user\":null,"
                      "\"metadata\":null,\"tools\":null,\"chat_template_kwargs\":null,"
                      "\"add_generation_prompt\":null}", &r, &err));
    assert_null(parse("{\"id\":\"a\",\"prompt\":\"x\"}", &d, &err));
    assert_int_equal(r.given, 0);
    assert_int_equal(r.max_tokens, d.max_tokens);
    assert_float_equal(r.temperature, d.temperature, 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.skip_special_tokens, 1);
    assert_int_equal(r.logprobs, -1);
    request_free(&r);
    request_free(&d);
    assert_string_equal(parse("{\"id\":null,\"prompt\":\"x\"}", &r, &err), "invalid_request");
    assert_non_null(strstr(err.msg, "'id'"));
    request_free(&r);
    assert_string_equal(parse("{\"id\":\"a\",\"prompt\":null}", &r, &err), "invalid_request");
    assert_non_null(strstr(err.msg, "exactly one of"));
    request_free(&r);
}

/* Every new field's bad values: the code, and a message naming the field
 * and what it accepts. */
static void test_openai_invalid(void **state) {
    (void)state;
    static const struct { const char *json, *says; } cases[] = {
        {"\"logprobs\":21", "'logprobs' must be an integer in [0, 20]"},
        {"\"logprobs\":\"yes\"", "'logprobs' must be true, false, null or an integer in [0, 20]"},
        {"\"logprobs\":true,\"top_logprobs\":21", "'top_logprobs' must be an integer in [0, 20]"},
        {"\"top_logprobs\":2", "'top_logprobs' needs \"logprobs\": true"},
        {"\"logprobs\":2,\"top_logprobs\":2", "'top_logprobs' needs \"logprobs\": true"},
        {"\"max_completion_tokens\":-1", "'max_completion_tokens' must be an integer in [0,"},
        {"\"max_completion_tokens\":3,\"max_tokens\":3", "not both"},
        {"\"presence_penalty\":2.5", "'presence_penalty' must be a number in [-2, 2]"},
        {"\"frequency_penalty\":-2.01", "'frequency_penalty' must be a number in [-2, 2]"},
        {"\"frequency_penalty\":\"1\"", "'frequency_penalty' must be a number in [-2, 2]"},
        {"\"repetition_penalty\":0", "'repetition_penalty' must be a number in (0, inf)"},
        {"\"logit_bias\":{\"5\":101}", "'logit_bias[\"5\"]' must be a number in [-100, 100]"},
        {"\"logit_bias\":{\"5\":\"1\"}", "'logit_bias[\"5\"]' must be a number in [-100, 100]"},
        {"\"logit_bias\":{\"-5\":1}", "'logit_bias' key '-5' is not a token id"},
        {"\"logit_bias\":{\"x\":1}", "'logit_bias' key 'x' is not a token id"},
        /* strtol skips spaces: a space before the sign must not let a
         * negative id through to the sampler */
        {"\"logit_bias\":{\" -5\":1}", "'logit_bias' key ' -5' is not a token id"},
        {"\"logit_bias\":{\"5\":1,\"05\":2}", "'logit_bias' names token 5 twice"},
        {"\"logit_bias\":[1]", "'logit_bias' must be an object of token id -> bias"},
        {"\"min_tokens\":-1", "'min_tokens' must be an integer in [0,"},
        {"\"min_tokens\":5,\"max_tokens\":4", "min_tokens (5) is over max_tokens (4)"},
        {"\"bad_words\":\"x\"", "'bad_words' must be an array"},
        {"\"bad_words\":[\"\"]", "'bad_words[0]' must not be empty"},
        {"\"skip_special_tokens\":1", "'skip_special_tokens' must be true or false"},
        {"\"include_stop_str_in_output\":\"no\"", "'include_stop_str_in_output' must be true or false"},
        {"\"model\":\"\"", "'model' must not be empty"},
        {"\"model\":3", "'model' must be a string"},
        {"\"user\":3", "'user' must be a string"},
        {"\"metadata\":[]", "'metadata' must be an object of at most 16 string values"},
        {"\"metadata\":{\"k\":1}", "'metadata' holds keys of at most 64 and string values"},
        {"\"prompt_token_ids\":[1]", "'prompt_ids' or 'prompt_token_ids'"},
        {"\"top_k\":-2", "'top_k' must be an integer in [-1,"},
        {"\"stop\":[1]", "'stop[0]' must be a string"},
        {"\"presense_penalty\":1", "did you mean 'presence_penalty'?"},
        {"\"max_token\":1", "did you mean 'max_tokens', 'min_tokens'?"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text), "{\"id\":\"a\",\"prompt_ids\":[1],%s}", cases[i].json);
        rlRequest r;
        rlError err;
        const char *code = parse(text, &r, &err);
        if (!code || strcmp(code, "invalid_request") || !strstr(err.msg, cases[i].says))
            fail_msg("case %zu %s: code %s, message %s", i, text, code ? code : "none",
                     code ? err.msg : "");
        request_free(&r);
    }
    static const char *const parts[] = {
        "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]",
        "[{\"type\":\"text\"}]",
        "[{\"type\":\"text\",\"text\":\"a\",\"extra\":1}]",
        "5",
    };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text), "{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":%s}]}",
                 parts[i]);
        rlRequest r;
        rlError err;
        const char *code = parse(text, &r, &err);
        if (!code || !strstr(err.msg, "messages[0].content"))
            fail_msg("content %zu: code %s, message %s", i, code ? code : "none", code ? err.msg : "");
        request_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_long_id_and_bad_utf8),
        cmocka_unit_test(test_openai_fields),
        cmocka_unit_test(test_openai_invalid),
        cmocka_unit_test(test_null_is_default),
        cmocka_unit_test(test_metadata_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
