/* interrupt.c: SIGINT / SIGTERM while a command starts up (see interrupt.h).
 * A signal handler may only call async-signal-safe functions, so both
 * lines are written out beforehand and the handler only unlinks, writes and
 * calls _exit. */
#include "worker/lib/interrupt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char interrupt_line[2][4400];     /* [0] SIGINT, [1] SIGTERM */
static const char *interrupt_tmp;

static void interrupt_on_signal(int sig) {
    const char *line = interrupt_line[sig == SIGTERM];
    if (interrupt_tmp) unlink(interrupt_tmp);
    ssize_t n = write(STDERR_FILENO, line, strlen(line));
    (void)n;    /* nothing left to do about a stderr that cannot be written */
    _exit(128 + sig);
}

void interrupt_at_start(const char *cmd, const char *tmp, const char *kept) {
    static const char *names[2] = {"SIGINT", "SIGTERM"};
    for (int i = 0; i < 2; i++)
        snprintf(interrupt_line[i], sizeof interrupt_line[i],
                 "redlm %s: interrupted (%s) while starting: %s\n", cmd, names[i], kept);
    interrupt_tmp = tmp;
    struct sigaction sa = {.sa_handler = interrupt_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
