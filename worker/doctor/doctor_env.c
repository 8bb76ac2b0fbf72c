/* doctor_env.c: NCCL and CUDA environment variables.
 *
 * NCCL reads dozens of NCCL_* variables and never says which one made it
 * slow or hang; a variable copied from another cluster's run script is a
 * common cause.  The three that decide how a host's GPUs reach each other
 * (NCCL_P2P_LEVEL, NCCL_P2P_DISABLE, NCCL_IB_DISABLE) are always shown with
 * their value and what they should be for the links doctor_gpu.c found;
 * every other one that is set is listed, and those that contradict this
 * machine are warnings. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/doctor/doctor.h"

extern char **environ;

static int env_is(const char *v, const char *want) { return v && !strcasecmp(v, want); }

/* The links doctor_gpu.c found, in words. */
static const char *env_links(const rlDoctor *d) {
    if (d->n_devices < 2) return "one GPU, no links";
    if (d->nvlink == 1) return "NVLink between every chosen pair";
    if (d->nvlink < 0) return "links unknown";
    return d->p2p == 0 ? "PCIe, peer-to-peer missing between some pairs"
                       : "PCIe (no NVLink between every pair)";
}

/* The three variables that decide the transport: value, what it should be
 * here, and a warning when they differ. */
static void env_check_transport(rlDoctor *d, const char *name) {
    const char *v = getenv(name);
    int multi = d->n_devices > 1, bad = 0;
    char topic[160], should[200];
    snprintf(topic, sizeof(topic), "env %s=%s", name, v ? v : "(unset)");
    if (!strcmp(name, "NCCL_P2P_LEVEL")) {
        snprintf(should, sizeof(should), "should be unset (NCCL picks the level from the links)");
        if (v && multi && env_is(v, "NVL") && d->nvlink == 0) {
            snprintf(should, sizeof(should),
                     "should be unset: NVL allows peer-to-peer only over NVLink, which these GPUs "
                     "lack, so NCCL falls back to host memory");
            bad = 1;
        } else if (v && multi && (env_is(v, "LOC") || !strcmp(v, "0")) && d->p2p != 0) {
            snprintf(should, sizeof(should),
                     "should be unset: %s turns peer-to-peer off between GPUs that have it", v);
            bad = 1;
        } else if (v && multi && env_is(v, "NVL") && d->nvlink < 0) {
            snprintf(should, sizeof(should),
                     "should be unset unless `nvidia-smi topo -m` shows NV# between the GPUs");
            bad = 1;
        }
    } else if (!strcmp(name, "NCCL_P2P_DISABLE")) {
        if (d->p2p == 0 && multi)
            snprintf(should, sizeof(should),
                     "should be unset: NCCL then copies directly where peer-to-peer works and "
                     "through host memory where it does not");
        else
            snprintf(should, sizeof(should),
                     "should be unset or 0: direct GPU-to-GPU copies are the fast path");
        bad = v && !env_is(v, "0") && multi && d->p2p != 0;
    } else {
        snprintf(should, sizeof(should),
                 "unset or 1: an instance's ranks share one host, NCCL uses no InfiniBand "
                 "between them");
    }
    doctor_line(d, bad ? RL_DOC_WARN : RL_DOC_OK, 0, topic, "%s (%s)", should, env_links(d));
}

static int env_is_transport(const char *name) {
    return !strcmp(name, "NCCL_P2P_LEVEL") || !strcmp(name, "NCCL_P2P_DISABLE") ||
           !strcmp(name, "NCCL_IB_DISABLE");
}

/* One other NCCL_* variable: a warning when it looks wrong here, else ok. */
static void env_check_nccl(rlDoctor *d, const char *name, const char *v) {
    int multi = d->n_devices > 1;
    char topic[160];
    snprintf(topic, sizeof(topic), "env %s=%s", name, v);
    if (!strcmp(name, "NCCL_SHM_DISABLE") && !env_is(v, "0") && d->p2p == 0) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "these GPUs cannot reach each other directly and shared memory is off, so "
                    "NCCL falls back to sockets; unset NCCL_SHM_DISABLE");
    } else if (!strcmp(name, "NCCL_NVLS_ENABLE") && !env_is(v, "0") && multi) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "NVLink SHARP multicast buffers take GPU memory that redlm's plan does not "
                    "count and can fail to set up in containers; set NCCL_NVLS_ENABLE=0");
    } else if (!strcmp(name, "NCCL_ALGO") || !strcmp(name, "NCCL_PROTO") ||
               !strcmp(name, "NCCL_MIN_NCHANNELS") || !strcmp(name, "NCCL_MAX_NCHANNELS")) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "forces NCCL's tuning, usually tuned for another machine; unset it unless "
                    "you measured it helps here");
    } else if (!strcmp(name, "NCCL_BUFFSIZE")) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "changes NCCL's buffer memory per channel; `redlm plan` assumes the 4 MiB "
                    "default, so its NCCL figure is off by the same factor");
    } else if (!strcmp(name, "NCCL_DEBUG") && (env_is(v, "TRACE") || env_is(v, "INFO"))) {
        doctor_line(d, RL_DOC_OK, 0, topic, "verbose NCCL logs on stderr (WARN keeps them short)");
    } else {
        doctor_line(d, RL_DOC_OK, 0, topic, "set");
    }
}

void doctor_check_env(rlDoctor *d) {
    env_check_transport(d, "NCCL_P2P_LEVEL");
    env_check_transport(d, "NCCL_P2P_DISABLE");
    env_check_transport(d, "NCCL_IB_DISABLE");
    int any = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "NCCL_", 5)) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        size_t n = (size_t)(eq - *e) < sizeof(name) - 1 ? (size_t)(eq - *e) : sizeof(name) - 1;
        memcpy(name, *e, n);
        name[n] = 0;
        if (env_is_transport(name)) continue;
        env_check_nccl(d, name, eq + 1);
        any = 1;
    }
    if (d->n_devices > 1 && !getenv("NCCL_NVLS_ENABLE"))
        doctor_line(d, RL_DOC_WARN, 0, "env NCCL_NVLS_ENABLE",
                    "unset, so NCCL may set up NVLink SHARP multicast on NVSwitch machines, "
                    "taking GPU memory the plan does not count; set NCCL_NVLS_ENABLE=0");
    else if (!any)
        doctor_line(d, RL_DOC_OK, 0, "env NCCL_*", "no others set: NCCL picks its own settings");

    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    const char *order = getenv("CUDA_DEVICE_ORDER");
    if (visible && !env_is(order, "PCI_BUS_ID"))
        doctor_line(d, RL_DOC_WARN, 0, "env CUDA_VISIBLE_DEVICES",
                    "'%s' counts GPUs in CUDA's fastest-first order, which can differ from "
                    "nvidia-smi's and the topology's PCI order; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                    "so the numbers agree", visible);
    else if (visible)
        doctor_line(d, RL_DOC_OK, 0, "env CUDA_VISIBLE_DEVICES",
                    "'%s' in PCI bus order; --devices numbers count within this list", visible);
}
