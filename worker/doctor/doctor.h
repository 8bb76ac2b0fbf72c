/* doctor.h: `redlm doctor`, checks of everything a start depends on, each
 * finding one line: ok, warn or fail, and for warn and fail what to do.
 *
 * Each area has its own file (doctor_gpu.c, doctor_env.c, doctor_model.c,
 * doctor_redis.c) writing through doctor_line, so the command only decides
 * which checks run.  Checks never stop at the first problem: a user fixing a
 * machine wants every finding at once. */
#ifndef RL_DOCTOR_H
#define RL_DOCTOR_H

#include <stdio.h>

#include "kernels/error.h"

#define RL_DOC_MAX_DEVICES 64

typedef enum rlDocLevel { RL_DOC_OK, RL_DOC_WARN, RL_DOC_FAIL } rlDocLevel;

typedef struct rlDoctor {
    FILE *out;
    int n_ok, n_warn, n_fail;
    rlErrorCode first_fail;     /* the exit status: the first failure's code */
    int devices[RL_DOC_MAX_DEVICES];
    int n_devices;              /* the GPUs chosen with --devices (0: all visible) */
    int devices_given;
    int p2p;                    /* every chosen pair can reach each other: 1, 0, -1 unknown */
    int nvlink;                 /* every chosen pair joined by NVLink: 1, 0, -1 unknown */
} rlDoctor;

void doctor_init(rlDoctor *d, FILE *out);

/* One finding: "ok    topic: text".  code is the failure's rlErrorCode. */
void doctor_line(rlDoctor *d, rlDocLevel level, rlErrorCode code, const char *topic,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Driver, runtime, GPUs and their memory, P2P between the chosen devices. */
void doctor_check_gpus(rlDoctor *d);
/* NCCL_* and CUDA_* variables that are set, and those that look wrong here. */
void doctor_check_env(rlDoctor *d);
/* A model directory: files present, readable, consistent; the tokenizer;
 * optional SHA-256 checksums against a manifest. */
void doctor_check_model(rlDoctor *d, const char *dir, const char *manifest);
/* Redis reachable and answering PING within 2 s. */
void doctor_check_redis(rlDoctor *d, const char *url, const char *stream, const char *dead);

#endif
