/* cmd_doctor.c: `redlm doctor`, every check a start depends on, one line
 * per finding (doctor.h).  Exit status: 0 when nothing failed (warnings
 * allowed), else the first failure's rlErrorCode, so a deployment script can
 * tell a broken model (3) from a missing GPU (6) or an unreachable Redis (8). */
#include <stdio.h>
#include <string.h>

#include "worker/commands.h"
#include "worker/doctor/doctor.h"
#include "worker/engine/layout.h"

static const char doctor_help[] =
    "usage: redlm doctor [--model DIR] [--devices LIST] [--redis URL] [--verify MANIFEST]\n"
    "\n"
    "Checks the driver and CUDA runtime, the GPUs (free memory, peer-to-peer between\n"
    "--devices), NCCL_* and CUDA_* variables, a model directory (files present,\n"
    "readable, consistent with their headers and the index; the tokenizer), optional\n"
    "SHA-256 checksums, and Redis.  One line per finding: ok, warn or fail.\n"
    "\n"
    "  --model DIR        a Hugging Face model directory (or a config.json)\n"
    "  --devices LIST     the GPUs to use, e.g. 0-5 (default: every visible one)\n"
    "  --redis URL        redis://[user:pass@]host[:port][/db] to try\n"
    "  --verify MANIFEST  SHA-256 of each file: a JSON object name -> hex, the hub's model\n"
    "                     API answer (\"siblings\" with \"lfs\".\"sha256\"), or sha256sum lines\n";

int cmd_doctor(int argc, char **argv) {
    const char *model = NULL, *redis = NULL, *manifest = NULL, *devices = NULL;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(doctor_help, stdout);
            return 0;
        }
        const char **dst = !strcmp(f, "--model")    ? &model
                           : !strcmp(f, "--redis")   ? &redis
                           : !strcmp(f, "--verify")  ? &manifest
                           : !strcmp(f, "--devices") ? &devices
                                                     : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "redlm doctor: %s '%s' (redlm doctor --help)\n",
                    dst ? "no value after" : "unknown argument", f);
            return RL_EUSAGE;
        }
        *dst = argv[++i];
    }
    if (manifest && !model) {
        fprintf(stderr, "redlm doctor: --verify checks a model's files: give --model DIR too\n");
        return RL_EUSAGE;
    }
    rlDoctor d;
    doctor_init(&d, stdout);
    if (devices) {
        rlError err = {0};
        if (layout_parse_list(devices, d.devices, RL_DOC_MAX_DEVICES, &d.n_devices, "--devices",
                              &err)) {
            fprintf(stderr, "redlm doctor: %s\n", err.msg);
            return RL_EUSAGE;
        }
        d.devices_given = 1;
    }
    doctor_check_gpus(&d);
    doctor_check_env(&d);
    if (model) doctor_check_model(&d, model, manifest);
    if (redis) doctor_check_redis(&d, redis);
    printf("%d ok, %d warn, %d fail\n", d.n_ok, d.n_warn, d.n_fail);
    return d.n_fail ? (int)d.first_fail : 0;
}
