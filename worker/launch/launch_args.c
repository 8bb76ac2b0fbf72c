/* launch_args.c: `redlm launch`'s command line: its own flags before `--`,
 * the worker options after it, checked so that the flags launch sets for
 * each instance are not also given to the workers. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "worker/launch/launch.h"
#include "worker/lib/flags.h"

/* The worker flags launch sets itself, in any spelling (-tp, --tp=3 ...). */
static int launch_check_wargs(rlLaunch *l) {
    int tp, pp, devs[1], n_devs;
    const char *consumer;
    rlFlags ours;
    flags_init(&ours, "launch", NULL);
    layout_flags_add_shape(&ours, &tp, &pp);
    layout_flags_add_devices(&ours, devs, 1, &n_devs, NULL);
    flags_string(&ours, "--consumer", &consumer, "NAME", NULL);
    for (int k = 0; k < l->n_wargs; k++) {
        const char *w = l->wargs[k];
        if ((!strcmp(w, "--backend") && k + 1 < l->n_wargs && !strcmp(l->wargs[k + 1], "cuda")) ||
            !strcmp(w, "--backend=cuda"))
            l->cuda = 1;
        const rlFlag *f = flags_find(&ours, w);
        if (f && !strcmp(f->name, "--consumer")) {
            fprintf(stderr, "redlm launch: launch names the workers PREFIX-0, PREFIX-1 ...: give --name "
                    "PREFIX to launch, before --, not --consumer to the workers\n");
            return RL_EUSAGE;
        }
        if (f) {
            fprintf(stderr, "redlm launch: give %s to launch, before --, not to the workers\n",
                    f->name);
            return RL_EUSAGE;
        }
    }
    return -1;
}

int launch_parse(rlLaunch *l, int argc, char **argv) {
    memset(l, 0, sizeof(*l));
    l->instances = l->tp = l->pp = 1;
    rlFlags fs;
    flags_init(&fs, "launch",
               "usage: redlm launch [options] -- <worker options>\n\n"
               "Starts N `redlm worker` instances; instance k gets devices k*tp*pp ..\n"
               "(k+1)*tp*pp-1 of LIST (default: every visible GPU) through\n"
               "CUDA_VISIBLE_DEVICES and the consumer name PREFIX-k (default host-pid).\n"
               "Without --backend cuda in the worker options they are CPU workers and\n"
               "LIST is ignored.  SIGTERM or SIGINT stops them all; they drain first.\n"
               "One that ends on its own stops the others (exit status non-zero); if\n"
               "launch itself is killed, its instances get SIGTERM.\n\n");
    fs.dashdash = 1;
    fs.unknown_hint = "worker options go after --";
    layout_flags_add_devices(&fs, l->devices, RL_MAX_RANKS, &l->n_devices,
                             "the GPUs to split, e.g. 0-5 (default: every visible one)");
    flags_int(&fs, "--instances", &l->instances, 1, LAUNCH_MAX, "N",
              "worker instances (default 1)");
    layout_flags_add_shape(&fs, &l->tp, &l->pp);
    flags_string(&fs, "--name", &l->name, "PREFIX", "consumer names PREFIX-0 .. (default host-pid)");
    flags_bool(&fs, "--dry-run", &l->dry, "print each instance's command line, start none");
    int rc = flags_main(&fs, argc, argv);
    if (rc >= 0) return rc;
    l->wargs = fs.rest;
    l->n_wargs = fs.n_rest;
    if (l->name) {
        snprintf(l->prefix, sizeof(l->prefix), "%s", l->name);
    } else {
        char host[128] = "host";
        gethostname(host, sizeof(host) - 1);
        snprintf(l->prefix, sizeof(l->prefix), "%s-%d", host, (int)getpid());
    }
    return launch_check_wargs(l);
}
