/* launch.h: `redlm launch`, several worker instances splitting a host's GPUs.
 *
 * Instance k runs `redlm worker --tp T --pp P --consumer <prefix>-<k> ARGS`
 * with CUDA_VISIBLE_DEVICES set to its n = T * P devices (TP groups placed
 * on the fastest links, launch_devices.c; devices [k*n, (k+1)*n) of the list
 * when no topology is known), so its ranks see devices 0..n-1 in
 * that order and adjacent ones form its TP groups (worker/engine/layout.h).
 * All instances join whatever consumer group ARGS name.  On CPU (no
 * --backend cuda in ARGS) the devices are ignored and the instances are
 * plain CPU workers.
 *
 * The work is split by job: launch_args.c reads the command line,
 * launch_devices.c finds the devices and gives each instance its own,
 * launch_spawn.c starts the instances, launch_supervise.c forwards signals
 * and ends the set when one instance ends. */
#ifndef RL_LAUNCH_H
#define RL_LAUNCH_H

#include <signal.h>
#include <sys/types.h>

#include "kernels/error.h"
#include "worker/engine/layout.h"

#define LAUNCH_MAX 64

typedef struct rlLaunch {
    /* the command line */
    int instances, tp, pp, dry;
    int devices[RL_MAX_RANKS], n_devices;   /* --devices, or every visible GPU */
    const char *name;
    char **wargs;                           /* worker options, after -- */
    int n_wargs;
    int cuda;                               /* --backend cuda among them */
    char prefix[200];                       /* consumer names are <prefix>-<k> */
    /* instance k's devices are assigned[k*tp*pp .. (k+1)*tp*pp - 1] */
    int assigned[RL_MAX_RANKS];
    /* the running set */
    pid_t pids[LAUNCH_MAX];
    int live[LAUNCH_MAX], n_live, started;
    int status, stopping;
    sigset_t signals, old_mask;
} rlLaunch;

/* launch_args.c: -1 when the launch goes on, else the exit status (help
 * printed, or a bad flag reported). */
int launch_parse(rlLaunch *l, int argc, char **argv);

/* launch_devices.c: the device list (probed through NVML when not given)
 * checked against instances x tp x pp, then launch_assign. */
int launch_devices(rlLaunch *l, rlError *err);
/* Give each instance its devices (l->assigned) from l->devices, each TP
 * group where its slowest link is fastest (one line each on stderr). */
void launch_assign(rlLaunch *l);

/* launch_spawn.c: print each instance's command line (--dry-run). */
void launch_print(const rlLaunch *l);
/* Block the signals the supervisor waits for, then start every instance;
 * a failed fork stops those already started (l->status says so). */
void launch_spawn(rlLaunch *l);

/* launch_supervise.c: wait for signals and instances until every instance
 * has ended; returns the exit status of the set. */
int launch_supervise(rlLaunch *l);
/* Send sig to every instance still running. */
void launch_signal_all(const rlLaunch *l, int sig);

#endif
