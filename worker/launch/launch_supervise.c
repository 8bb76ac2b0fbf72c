/* launch_supervise.c: the launcher only supervises.  It waits for signals
 * with sigwaitinfo, so SIGTERM/SIGINT are forwarded to every instance (each
 * drains its running jobs, see --drain-timeout), and an instance that ends
 * on its own stops the others, making the exit status non-zero so a
 * supervisor restarts the set. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include "worker/launch/launch.h"

void launch_signal_all(const rlLaunch *l, int sig) {
    for (int k = 0; k < l->started; k++)
        if (l->live[k]) kill(l->pids[k], sig);
}

/* Instance pid ended with wait status ws. */
static void launch_reap(rlLaunch *l, pid_t pid, int ws) {
    int k = 0;
    while (k < l->started && l->pids[k] != pid) k++;
    if (k == l->started || !l->live[k]) return;
    l->live[k] = 0;
    l->n_live--;
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    if (code && !l->status) l->status = code;
    if (l->stopping) return;
    fprintf(stderr, "redlm launch: instance %d (pid %d) ended on its own (status %d); "
            "stopping the others\n", k, (int)pid, code);
    if (!l->status) l->status = RL_EINTERNAL;
    l->stopping = 1;
    launch_signal_all(l, SIGTERM);
}

int launch_supervise(rlLaunch *l) {
    while (l->n_live > 0) {
        siginfo_t si;
        int sig = sigwaitinfo(&l->signals, &si);
        if (sig == SIGTERM || sig == SIGINT) {
            l->stopping = 1;
            launch_signal_all(l, SIGTERM);
            continue;
        }
        int ws;
        pid_t pid;
        while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) launch_reap(l, pid, ws);
    }
    return l->status;
}
