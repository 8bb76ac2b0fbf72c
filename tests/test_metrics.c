/* test_metrics.c: the Prometheus text and its HTTP endpoint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One request, the whole answer (the server closes: HTTP/1.0). */
static void http(int port, const char *req, char *buf, size_t cap) {
    int fd = tcp_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fd);
}

/* A metrics registry served on a free port, the port in *port. */
static rlMetrics *metrics_served(int *port) {
    rlMetrics *m = metrics_create("none");
    rlError err;
    *port = redis_server_free_port();
    assert_int_equal(metrics_serve(m, *port, &err), 0);
    return m;
}

static void test_http(void **state) {
    (void)state;
    int port;
    rlMetrics *m = metrics_served(&port);
    static char buf[65536];
    http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, "200 OK"));
    assert_non_null(strstr(buf, "# TYPE redlm:num_requests_running gauge"));
    metrics_free(m);
}

/* A wrong method is 405 naming the allowed ones (not "not found"), HEAD is
 * GET without the body, an unknown path is 404. */
static void test_http_methods(void **state) {
    (void)state;
    int port;
    rlMetrics *m = metrics_served(&port);
    static char buf[65536];
    http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", buf, sizeof(buf));
    assert_non_null(strstr(buf, "HTTP/1.1 405"));
    assert_non_null(strstr(buf, "Allow: GET, HEAD"));
    http(port, "DELETE / HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, "HTTP/1.1 405"));
    http(port, "HEAD /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_null(strstr(buf, "# TYPE"));
    http(port, "GET /nope HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, "HTTP/1.1 404"));
    http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_non_null(strstr(buf, "# TYPE redlm:num_requests_running gauge"));
    metrics_free(m);
}

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d)) n++;
    if (d) closedir(d);
    return n;
}

/* Clients that connect and send nothing take at most
 * METRICS_MAX_CONNECTIONS of the process's descriptors (the worker's Redis
 * reconnects need some), and each is closed after METRICS_IDLE_S. */
static void test_http_idle_clients(void **state) {
    (void)state;
    int port;
    rlMetrics *m = metrics_served(&port);
    enum { N = 200 };
    int fds[N], base = open_fds();
    for (int i = 0; i < N; i++) assert_true((fds[i] = tcp_connect(port)) >= 0);
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL); /* the server accepts what it will */
    int server = open_fds() - base - N;
    printf("%d idle clients: the server holds %d descriptors for them\n", N, server);
    assert_true(server <= METRICS_MAX_CONNECTIONS + 2);
    for (int i = 0; i < N; i++) close(fds[i]);
    /* one idle client: closed by the server after METRICS_IDLE_S */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    nanosleep(&pause, NULL); /* the slots of the closed ones are freed */
    int fd = tcp_connect(port);
    assert_true(fd >= 0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    int ready = poll(&p, 1, (METRICS_IDLE_S + 10) * 1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("an idle client was closed after %.1f s (bound %d s)\n", s, METRICS_IDLE_S + 10);
    assert_int_equal(ready, 1);
    assert_true(read(fd, &c, 1) <= 0);
    close(fd);
    /* and the endpoint still answers */
    static char buf[65536];
    http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    metrics_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_http),
        cmocka_unit_test(test_http_methods),
        cmocka_unit_test(test_http_idle_clients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
