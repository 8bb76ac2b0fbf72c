/* cmd_doctor.c: `redlm doctor`, every check a start depends on, one line
 * per finding (doctor.h).  Exit status: 0 when nothing failed (warnings
 * allowed), else the first failure's rlErrorCode, so a deployment script can
 * tell a broken model (3) from a missing GPU (6) or an unreachable Redis (8). */
#include <stdio.h>
#include <string.h>

#include "worker/commands.h"
#include "worker/doctor/doctor.h"
#include "worker/engine/layout.h"
#include "worker/lib/flags.h"

int cmd_doctor(int argc, char **argv) {
    const char *model = NULL, *redis = NULL, *manifest = NULL, *stream = "redlm:jobs", *dead = "redlm:dead";
    rlDoctor d;
    doctor_init(&d, stdout);
    rlFlags fs;
    flags_init(&fs, "doctor",
               "usage: redlm doctor [--model DIR] [--devices LIST] [--redis URL [--stream KEY]\n"
               "                    [--dead KEY]] [--verify MANIFEST]\n"
               "\n"
               "Checks the driver and CUDA runtime, the GPUs (free memory, peer-to-peer between\n"
               "--devices), NCCL_* and CUDA_* variables, a model directory (files present,\n"
               "readable, consistent with their headers and the index; the tokenizer), optional\n"
               "SHA-256 checksums, and Redis.  One line per finding: ok, warn or fail.\n"
               "\n");
    flags_string(&fs, "--model", &model, "DIR", "a Hugging Face model directory (or a config.json)");
    layout_flags_add_devices(&fs, d.devices, RL_DOC_MAX_DEVICES, &d.n_devices,
                             "the GPUs to use, e.g. 0-5 (default: every visible one)");
    flags_string(&fs, "--redis", &redis, "URL", "redis://[user:pass@]host[:port][/db] to try");
    flags_string(&fs, "--stream", &stream, "KEY", "with --redis: the worker's job stream, whose keys are\n"
                 "checked (default redlm:jobs)");
    flags_string(&fs, "--dead", &dead, "KEY", "with --redis: its dead-letter stream (default redlm:dead)");
    flags_string(&fs, "--verify", &manifest, "MANIFEST",
                 "SHA-256 of each file: a JSON object name -> hex, the hub's\n"
                 "model API answer (\"siblings\" with \"lfs\".\"sha256\"), or\n"
                 "sha256sum lines");
    flags_requires(&fs, "--verify", "--model");
    flags_requires(&fs, "--stream", "--redis");
    flags_requires(&fs, "--dead", "--redis");
    int rc = flags_main(&fs, argc, argv);
    if (rc >= 0) return rc;
    d.devices_given = flags_given(&fs, "--devices") > 0;
    doctor_check_gpus(&d);
    doctor_check_env(&d);
    if (model) doctor_check_model(&d, model, manifest);
    if (redis) doctor_check_redis(&d, redis, stream, dead);
    printf("%d ok, %d warn, %d fail\n", d.n_ok, d.n_warn, d.n_fail);
    return d.n_fail ? (int)d.first_fail : 0;
}
