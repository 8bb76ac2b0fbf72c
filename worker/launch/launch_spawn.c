/* launch_spawn.c: each instance's command line, and starting the instances
 * (fork + exec of this same binary, with its CUDA_VISIBLE_DEVICES). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "worker/launch/launch.h"

#define LAUNCH_ARGS (8 + 256)

typedef struct launchCmd {
    char vis[512], consumer[256], tp[16], pp[16];
    char *args[LAUNCH_ARGS];
    int n;
} launchCmd;

/* Instance k: `redlm worker --tp T --pp P --consumer PREFIX-k ARGS` and
 * its devices. */
static void launch_command(const rlLaunch *l, int k, launchCmd *c) {
    int n = l->tp * l->pp;
    c->vis[0] = 0;
    for (int d = 0, off = 0; l->cuda && d < n; d++)
        off += snprintf(c->vis + off, sizeof(c->vis) - (size_t)off, "%s%d", d ? "," : "",
                        l->assigned[k * n + d]);
    snprintf(c->consumer, sizeof(c->consumer), "%s-%d", l->prefix, k);
    snprintf(c->tp, sizeof(c->tp), "%d", l->tp);
    snprintf(c->pp, sizeof(c->pp), "%d", l->pp);
    c->n = 0;
    c->args[c->n++] = "redlm";
    c->args[c->n++] = "worker";
    c->args[c->n++] = "--tp", c->args[c->n++] = c->tp;
    c->args[c->n++] = "--pp", c->args[c->n++] = c->pp;
    c->args[c->n++] = "--consumer", c->args[c->n++] = c->consumer;
    for (int w = 0; w < l->n_wargs && c->n < LAUNCH_ARGS - 1; w++) c->args[c->n++] = l->wargs[w];
    c->args[c->n] = NULL;
}

/* One word as a shell reads it back: quoted when it holds anything but
 * letters, digits and _@%+=:,./- (a path with a space, an empty value). */
static void launch_print_word(const char *w) {
    if (*w && strspn(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") ==
                  strlen(w)) {
        fputs(w, stdout);
        return;
    }
    putchar('\'');
    for (; *w; w++)
        if (*w == '\'') fputs("'\\''", stdout);
        else putchar(*w);
    putchar('\'');
}

void launch_print(const rlLaunch *l) {
    for (int k = 0; k < l->instances; k++) {
        launchCmd c;
        launch_command(l, k, &c);
        if (l->cuda) printf("CUDA_VISIBLE_DEVICES=%s ", c.vis);
        for (int w = 0; w < c.n; w++) {
            if (w) putchar(' ');
            launch_print_word(c.args[w]);
        }
        printf("\n");
    }
}

void launch_spawn(rlLaunch *l) {
    /* Signals are taken synchronously; children get the old mask back. */
    sigemptyset(&l->signals);
    sigaddset(&l->signals, SIGTERM);
    sigaddset(&l->signals, SIGINT);
    sigaddset(&l->signals, SIGCHLD);
    sigprocmask(SIG_BLOCK, &l->signals, &l->old_mask);
    pid_t launcher = getpid();
    for (int k = 0; k < l->instances; k++) {
        launchCmd c;
        launch_command(l, k, &c);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "redlm launch: cannot start instance %d: %s\n", k, strerror(errno));
            l->status = RL_EINTERNAL;
            l->stopping = 1;
            launch_signal_all(l, SIGTERM);
            return;
        }
        if (pid == 0) {
            /* The set ends with its launcher however that ends (kill -9, the
             * OOM killer): an orphaned instance would keep its GPUs from the
             * set a supervisor starts next.  SIGTERM: it drains first. */
            if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != launcher) _exit(128 + SIGTERM);
            /* Its own process group: a Ctrl-C at the terminal reaches the
             * launcher alone, which forwards one SIGTERM; a worker that got
             * the terminal's SIGINT too would take the pair as "stop now"
             * and abandon its running jobs instead of draining them. */
            setpgid(0, 0);
            sigprocmask(SIG_SETMASK, &l->old_mask, NULL);
            if (l->cuda) setenv("CUDA_VISIBLE_DEVICES", c.vis, 1);
            execv("/proc/self/exe", c.args);
            fprintf(stderr, "redlm launch: cannot run instance %d: %s\n", k, strerror(errno));
            _exit(127);
        }
        setpgid(pid, pid); /* also here: whichever runs first */
        l->pids[k] = pid;
        l->live[k] = 1;
        l->n_live++;
        l->started = k + 1;
        fprintf(stderr, "redlm launch: instance %d: consumer %s%s%s, pid %d\n", k, c.consumer,
                l->cuda ? ", CUDA_VISIBLE_DEVICES=" : "", l->cuda ? c.vis : "", (int)pid);
    }
}
