/* test_metrics.c: the Prometheus text and its HTTP endpoint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker/redis/metrics.h"
#include "tests/redis_server.h" /* for a free port */

static void test_render(void **state) {
    (void)state;
    rlMetrics *m = metrics_create("awq int4 g128");
    rlEngineStats st = {.running = 3, .waiting = 2, .kv_blocks_used = 5, .kv_blocks_total = 10,
                        .generation_tokens = 77};
    metrics_set_engine(m, &st);
    metrics_observe_done(m, RL_FINISH_LENGTH, 0.03, 0.002, 0.2);
    metrics_observe_done(m, RL_FINISH_STOP, 0.5, -1, 0.6);
    metrics_count_error(m, "invalid_request");
    metrics_count_error(m, "invalid_request");
    char *t = metrics_render(m);
    assert_non_null(strstr(t, "redlm:num_requests_running 3\n"));
    assert_non_null(strstr(t, "redlm:model_info{quantization=\"awq int4 g128\"} 1\n"));
    assert_non_null(strstr(t, "redlm:num_requests_waiting 2\n"));
    assert_non_null(strstr(t, "redlm:kv_cache_usage_perc 0.5\n"));
    assert_non_null(strstr(t, "redlm:generation_tokens_total 77\n"));
    assert_non_null(strstr(t, "redlm:request_success_total{finished_reason=\"length\"} 1\n"));
    assert_non_null(strstr(t, "redlm:request_errors_total{code=\"invalid_request\"} 2\n"));
    assert_non_null(strstr(t, "redlm:time_to_first_token_seconds_bucket{le=\"0.04\"} 1\n"));
    assert_non_null(strstr(t, "redlm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(t, "redlm:time_per_output_token_seconds_count 1\n"));
    assert_non_null(strstr(t, "redlm:e2e_request_latency_seconds_count 2\n"));
    free(t);
    metrics_free(m);
}

static void test_http(void **state) {
    (void)state;
    rlMetrics *m = metrics_create("none");
    rlError err;
    int port = redis_server_free_port();
    assert_int_equal(metrics_serve(m, port, &err), 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "exec 3<>/dev/tcp/127.0.0.1/%d; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3", port);
    char full[256];
    snprintf(full, sizeof(full), "bash -c \"%s\"", cmd);
    FILE *p = popen(full, "r");
    char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, p);
    buf[n] = 0;
    pclose(p);
    assert_non_null(strstr(buf, "200 OK"));
    assert_non_null(strstr(buf, "# TYPE redlm:num_requests_running gauge"));
    metrics_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_http),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
