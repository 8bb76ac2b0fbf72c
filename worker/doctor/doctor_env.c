/* doctor_env.c: NCCL and CUDA environment variables.
 *
 * NCCL reads dozens of NCCL_* variables and never says which one made it
 * slow or hang; a variable copied from another cluster's run script is a
 * common cause.  Every one that is set is listed, and those that contradict
 * this machine (as far as doctor_gpu.c found out) are warnings. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/doctor/doctor.h"

extern char **environ;

static int env_is(const char *v, const char *want) { return v && !strcasecmp(v, want); }

/* One NCCL_* variable: a warning when it looks wrong here, else ok. */
static void env_check_nccl(rlDoctor *d, const char *name, const char *v) {
    int multi = d->n_devices > 1;
    char topic[160];
    snprintf(topic, sizeof(topic), "env %s=%s", name, v);
    if (!strcmp(name, "NCCL_P2P_LEVEL") && env_is(v, "NVL") && d->nvlink == 0) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "the chosen GPUs are not all joined by NVLink, so NCCL falls back to "
                    "host memory between them; unset NCCL_P2P_LEVEL (or set it to PIX/PXB to "
                    "allow PCIe peer-to-peer)");
    } else if (!strcmp(name, "NCCL_P2P_LEVEL") && env_is(v, "NVL") && d->nvlink < 0) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "peer-to-peer only over NVLink, and NVLink could not be checked here; "
                    "if `nvidia-smi topo -m` shows no NV# between your GPUs, unset it");
    } else if (!strcmp(name, "NCCL_P2P_DISABLE") && !env_is(v, "0") && multi) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "tensor-parallel traffic between GPUs goes through host memory, several "
                    "times slower; unset it unless peer-to-peer hangs on this machine");
    } else if (!strcmp(name, "NCCL_SHM_DISABLE") && !env_is(v, "0") && d->p2p == 0) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "these GPUs cannot reach each other directly and shared memory is off, so "
                    "NCCL falls back to sockets; unset NCCL_SHM_DISABLE");
    } else if (!strcmp(name, "NCCL_NVLS_ENABLE") && !env_is(v, "0") && multi) {
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "NVLink SHARP multicast buffers take GPU memory that redlm's plan does not "
                    "count and can fail to set up in containers; set NCCL_NVLS_ENABLE=0");
    } else if (!strcmp(name, "NCCL_IB_DISABLE")) {
        doctor_line(d, RL_DOC_OK, 0, topic, "fine: the ranks of a redlm instance share one host");
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
    int any = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "NCCL_", 5)) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        size_t n = (size_t)(eq - *e) < sizeof(name) - 1 ? (size_t)(eq - *e) : sizeof(name) - 1;
        memcpy(name, *e, n);
        name[n] = 0;
        env_check_nccl(d, name, eq + 1);
        any = 1;
    }
    if (d->n_devices > 1 && !getenv("NCCL_NVLS_ENABLE"))
        doctor_line(d, RL_DOC_WARN, 0, "env NCCL_NVLS_ENABLE",
                    "unset, so NCCL may set up NVLink SHARP multicast on NVSwitch machines, "
                    "taking GPU memory the plan does not count; set NCCL_NVLS_ENABLE=0");
    else if (!any)
        doctor_line(d, RL_DOC_OK, 0, "env NCCL_*", "none set: NCCL picks its own settings");

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
