/* redis_server.h: a throwaway redis-server for one test program: a free
 * port, a temporary directory, stopped and removed at the end.  Header-only
 * because every tests/test_*.c is its own program. */
#ifndef RL_TEST_REDIS_SERVER_H
#define RL_TEST_REDIS_SERVER_H

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct rlRedisServer {
    pid_t pid;
    int port;
    char dir[64];
} rlRedisServer;

static inline int redis_server_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &len))
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static inline redisContext *redis_server_connect(const rlRedisServer *s) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static inline int redis_server_start(rlRedisServer *s) {
    snprintf(s->dir, sizeof(s->dir), "/tmp/redlm-test-XXXXXX");
    if (!mkdtemp(s->dir) || (s->port = redis_server_free_port()) < 0) return -1;
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    s->pid = fork();
    if (s->pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", s->dir,
               "--save", "", "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        redisContext *c = redis_server_connect(s);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static inline void redis_server_stop(rlRedisServer *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", s->dir);
    if (system(cmd)) {}
}

#endif
