/* cmd_launch.c: `redlm launch`, several worker instances splitting a host's GPUs.
 *
 * Instance k runs `redlm worker --tp T --pp P --consumer <prefix>-<k> ARGS`
 * with CUDA_VISIBLE_DEVICES set to devices [k*n, (k+1)*n) of the list
 * (n = T * P), so its ranks see devices 0..n-1 in the listed order and
 * adjacent ones form its TP groups (worker/layout.h).  All instances join
 * whatever consumer group ARGS name.  On CPU (no --backend cuda in ARGS) the
 * devices are ignored and the instances are plain CPU workers.
 *
 * This process only supervises: it waits for signals with sigwaitinfo, so
 * SIGTERM/SIGINT are forwarded to every instance (each drains its running
 * jobs, see --drain-timeout) and an instance that ends on its own stops the
 * others, making the exit status non-zero so a supervisor restarts the set.
 * scripts/launch-instances is the same command for scripts and compose files. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gpuinfo.h"
#include "worker/commands.h"
#include "worker/engine/layout.h"

#define LAUNCH_MAX 64

static void launch_usage(FILE *f) {
    fprintf(f,
            "usage: redlm launch [--devices LIST] [--instances N] [--tp N] [--pp M]\n"
            "                    [--name PREFIX] [--dry-run] -- <worker options>\n\n"
            "Starts N `redlm worker` instances; instance k gets devices k*tp*pp ..\n"
            "(k+1)*tp*pp-1 of LIST (default: every visible GPU) through\n"
            "CUDA_VISIBLE_DEVICES and the consumer name PREFIX-k (default host-pid).\n"
            "Without --backend cuda in the worker options they are CPU workers and\n"
            "LIST is ignored.  SIGTERM or SIGINT stops them all; they drain first.\n");
}

static int launch_int(const char *flag, const char *v, int *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < 1 || x > LAUNCH_MAX) {
        fprintf(stderr, "redlm launch: %s '%s' must be a whole number from 1 to %d\n", flag, v,
                LAUNCH_MAX);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* Forward sig to every instance still running. */
static void launch_signal_all(const pid_t *pids, const int *live, int n, int sig) {
    for (int k = 0; k < n; k++)
        if (live[k]) kill(pids[k], sig);
}

int cmd_launch(int argc, char **argv) {
    int instances = 1, tp = 1, pp = 1, dry = 0, n_devs = 0, devs[RL_MAX_RANKS];
    const char *devices = NULL, *name = NULL;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            launch_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--dry-run")) {
            dry = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "redlm launch: unknown option %s (worker options go after --)\n\n", a);
            launch_usage(stderr);
            return RL_EUSAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--devices")) devices = v;
        else if (!strcmp(a, "--name")) name = v;
        else if (!strcmp(a, "--instances")) { if (launch_int(a, v, &instances)) return RL_EUSAGE; }
        else if (!strcmp(a, "--tp")) { if (launch_int(a, v, &tp)) return RL_EUSAGE; }
        else if (!strcmp(a, "--pp")) { if (launch_int(a, v, &pp)) return RL_EUSAGE; }
        else {
            fprintf(stderr, "redlm launch: unknown option %s (worker options go after --)\n", a);
            return RL_EUSAGE;
        }
    }
    char **wargs = argv + i;
    int n_wargs = argc - i, cuda = 0;
    for (int k = 0; k < n_wargs; k++) {
        if ((!strcmp(wargs[k], "--backend") && k + 1 < n_wargs && !strcmp(wargs[k + 1], "cuda")) ||
            !strcmp(wargs[k], "--backend=cuda"))
            cuda = 1;
        static const char *ours[] = {"--tp", "--pp", "--devices", "--consumer"};
        for (int o = 0; o < 4; o++)
            if (!strcmp(wargs[k], ours[o])) {
                fprintf(stderr, "redlm launch: give %s to launch, before --, not to the workers\n",
                        ours[o]);
                return RL_EUSAGE;
            }
    }

    int n = tp * pp;
    if (cuda) {
        rlError err;
        if (devices) {
            if (layout_parse_list(devices, devs, RL_MAX_RANKS, &n_devs, "--devices", &err)) {
                fprintf(stderr, "redlm launch: %s\n", err.msg);
                return RL_EUSAGE;
            }
        } else {
            rlGpuHost host;
            char why[256];
            if (rl_gpu_probe(&host, why, sizeof(why)) || host.count == 0) {
                fprintf(stderr, "redlm launch: no --devices given and no GPU found (%s); list "
                        "the devices, or drop --backend cuda for CPU workers\n",
                        host.count == 0 ? why : "NVML lists none");
                return RL_EDEVICE;
            }
            for (n_devs = 0; n_devs < host.count; n_devs++) devs[n_devs] = n_devs;
        }
        if (n_devs < instances * n) {
            fprintf(stderr, "redlm launch: %d instances of tp %d x pp %d need %d devices, but "
                    "%d are listed; use fewer instances or a smaller layout\n", instances, tp, pp,
                    instances * n, n_devs);
            return RL_EUSAGE;
        }
        if (n_devs > instances * n)
            fprintf(stderr, "redlm launch: warning: %d listed devices stay unused\n",
                    n_devs - instances * n);
    } else if (devices) {
        fprintf(stderr, "redlm launch: CPU workers (no --backend cuda): --devices ignored\n");
    }

    char prefix[200];
    if (name) {
        snprintf(prefix, sizeof(prefix), "%s", name);
    } else {
        char host[128] = "host";
        gethostname(host, sizeof(host) - 1);
        snprintf(prefix, sizeof(prefix), "%s-%d", host, (int)getpid());
    }

    /* Signals are taken synchronously; children get the default mask back. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);

    pid_t pids[LAUNCH_MAX];
    int live[LAUNCH_MAX] = {0}, n_live = 0, status = 0, stopping = 0;
    for (int k = 0; k < instances; k++) {
        char vis[512] = "", consumer[256], stp[16], spp[16];
        for (int d = 0, off = 0; cuda && d < n; d++)
            off += snprintf(vis + off, sizeof(vis) - (size_t)off, "%s%d", d ? "," : "",
                            devs[k * n + d]);
        snprintf(consumer, sizeof(consumer), "%s-%d", prefix, k);
        snprintf(stp, sizeof(stp), "%d", tp);
        snprintf(spp, sizeof(spp), "%d", pp);
        char *args[8 + 256];
        int na = 0;
        args[na++] = "redlm";
        args[na++] = "worker";
        args[na++] = "--tp", args[na++] = stp, args[na++] = "--pp", args[na++] = spp;
        args[na++] = "--consumer", args[na++] = consumer;
        for (int w = 0; w < n_wargs && na < (int)(sizeof(args) / sizeof(args[0])) - 1; w++)
            args[na++] = wargs[w];
        args[na] = NULL;
        if (dry) {
            if (cuda) printf("CUDA_VISIBLE_DEVICES=%s ", vis);
            for (int w = 0; w < na; w++) printf("%s%s", w ? " " : "", args[w]);
            printf("\n");
            continue;
        }
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "redlm launch: cannot start instance %d: %s\n", k, strerror(errno));
            status = RL_EINTERNAL;
            stopping = 1;
            launch_signal_all(pids, live, k, SIGTERM);
            break;
        }
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            if (cuda) setenv("CUDA_VISIBLE_DEVICES", vis, 1);
            execv("/proc/self/exe", args);
            fprintf(stderr, "redlm launch: cannot run instance %d: %s\n", k, strerror(errno));
            _exit(127);
        }
        pids[k] = pid;
        live[k] = 1;
        n_live++;
        fprintf(stderr, "redlm launch: instance %d: consumer %s%s%s, pid %d\n", k, consumer,
                cuda ? ", CUDA_VISIBLE_DEVICES=" : "", cuda ? vis : "", (int)pid);
    }
    if (dry) return 0;

    while (n_live > 0) {
        siginfo_t si;
        int sig = sigwaitinfo(&set, &si);
        if (sig == SIGTERM || sig == SIGINT) {
            stopping = 1;
            launch_signal_all(pids, live, instances, SIGTERM);
            continue;
        }
        int ws;
        pid_t pid;
        while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
            int k = 0;
            while (k < instances && pids[k] != pid) k++;
            if (k == instances || !live[k]) continue;
            live[k] = 0;
            n_live--;
            int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            if (code && !status) status = code;
            if (!stopping) {
                fprintf(stderr, "redlm launch: instance %d (pid %d) ended on its own (status %d); "
                        "stopping the others\n", k, (int)pid, code);
                if (!status) status = RL_EINTERNAL;
                stopping = 1;
                launch_signal_all(pids, live, instances, SIGTERM);
            }
        }
    }
    return status;
}
