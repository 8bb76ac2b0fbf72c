/* main.c: `redlm <command> ...`, dispatching to worker/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "worker/commands.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"generate", cmd_generate, "run a JSONL file of requests offline (no Redis)"},
    {"worker", cmd_worker, "serve jobs from a Redis stream"},
    {"submit", cmd_submit, "send a JSONL file of jobs through Redis and collect the results"},
    {"status", cmd_status, "show the queue, the consumer group and the live instances"},
    {"launch", cmd_launch, "start several worker instances that split a host's GPUs"},
    {"tokenize", cmd_tokenize, "JSONL {\"text\"} -> {\"ids\"}"},
    {"detokenize", cmd_detokenize, "JSONL {\"ids\"} -> {\"text\"}"},
    {"bench", cmd_bench, "measure prefill and decode throughput against the machine's ceilings"},
    {"plan", cmd_plan, "memory plan for every layout of a model on some GPUs"},
    {"doctor", cmd_doctor, "check the driver, GPUs, NCCL settings, model files and Redis"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: redlm <command> [options]   (redlm <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "redlm: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
