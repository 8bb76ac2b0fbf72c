/* test_output.c: worker/engine/output, an engine output as the protocol's
 * reply event: every field of a `done`, in order (timings in whole ms), the
 * same offline without seq / attempt, and an `error`. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/engine/output.h"

static void test_events(void **state) {
    (void)state;
    rlRequest r;
    request_init(&r);
    r.id = "job";
    int32_t ids[2] = {5, 6};
    rlTokenLogprob lp[3] = {{0}, {.id = 6, .logprob = -0.5f, .n_top = 1, .top_ids = {6},
                                  .top_logprobs = {-0.5f}}, {0}};
    rlOutput o = {.kind = RL_OUT_DONE, .req = &r, .index = 1, .token_ids = ids, .n_tokens = 2,
                  .text = "hi", .text_len = 2, .finish = RL_FINISH_LENGTH,
                  .prompt_logprobs = lp, .n_prompt = 2, .prompt_tokens = 2,
                  .completion_tokens = 2, .cached_tokens = 0, .queued_ms = 0.54551899991929531,
                  .first_token_ms = 14.405365999788046, .total_ms = 70.5, .model = "qwen"};
    json_t *ev = output_event(&o, 3);
    char *s = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_string_equal(s,
        "{\"id\":\"job\",\"event\":\"done\",\"seq\":3,\"attempt\":1,\"index\":1,"
        "\"token_ids\":[5,6],\"text\":\"hi\",\"model\":\"qwen\",\"finish_reason\":\"length\",\"stop_reason\":null,"
        "\"prompt_logprobs\":[null,{\"id\":6,\"logprob\":-0.5,\"top\":[[6,-0.5]]}],"
        "\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2,\"cached_tokens\":0},"
        "\"sampling\":{\"temperature\":1.0,\"top_p\":1.0,\"top_k\":0,\"min_p\":0.0,"
        "\"repetition_penalty\":1.0},"
        "\"timing\":{\"queued_ms\":1,\"first_token_ms\":14,\"total_ms\":71}}");
    free(s);
    json_decref(ev);
    /* offline (redlm generate): no Redis-only fields */
    ev = output_event(&o, OUTPUT_OFFLINE);
    assert_non_null(ev);
    assert_null(json_object_get(ev, "seq"));
    assert_null(json_object_get(ev, "attempt"));
    assert_string_equal(json_string_value(json_object_get(ev, "event")), "done");
    json_decref(ev);
    rlOutput e = {.kind = RL_OUT_ERROR, .req = &r, .error_code = "prompt_too_long",
                  .error_message = "too long"};
    ev = output_event(&e, 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "error"), "code")),
                        "prompt_too_long");
    json_decref(ev);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
