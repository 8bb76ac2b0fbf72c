/* profile.cu: device time per operation kind, measured with CUDA events.
 *
 * `redlm bench --profile` turns this on to find where a step's time goes.
 * Every operation records an event on the stream as it starts; the time from
 * one event to the next is charged to the operation that recorded the first,
 * so the GPU's idle gaps while the host launches are charged too (they are
 * part of what a step costs).  Events are read back at each sync, so nothing
 * blocks between syncs that would not block anyway.  Off (c->prof NULL), an
 * operation pays one pointer test. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

#define PROF_EVENTS 2048
#define PROF_KINDS 48
#define PROF_NAME 40

struct rlProf {
    cudaEvent_t ev[PROF_EVENTS + 1];
    int kind[PROF_EVENTS];
    int n;
    char name[PROF_KINDS][PROF_NAME];
    double ms[PROF_KINDS];
    long calls[PROF_KINDS];
    int n_kinds;
};

int cuda_prof_init(rlCuda *c, rlError *err) {
    rlProf *p = (rlProf *)calloc(1, sizeof *p);
    if (!p) return rl_error(err, RL_EMEMORY, "CUDA backend: out of host memory for profiling");
    for (int i = 0; i <= PROF_EVENTS; i++)
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            for (int j = 0; j < i; j++) cudaEventDestroy(p->ev[j]);
            free(p);
            return rl_error(err, RL_EDEVICE, "CUDA backend: cannot create profiling events");
        }
    c->prof = p;
    return 0;
}

void cuda_prof_free(rlCuda *c) {
    if (!c->prof) return;
    for (int i = 0; i <= PROF_EVENTS; i++) cudaEventDestroy(c->prof->ev[i]);
    free(c->prof);
    c->prof = NULL;
}

/* Charge the recorded intervals to their kinds; the last one ends now. */
void cuda_prof_flush(rlCuda *c) {
    rlProf *p = c->prof;
    if (!p || !p->n) return;
    cudaEventRecord(p->ev[p->n], c->stream);
    cudaEventSynchronize(p->ev[p->n]);
    for (int i = 0; i < p->n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]) == cudaSuccess)
            p->ms[p->kind[i]] += ms;
    }
    p->n = 0;
}

void cuda_prof_mark(rlCuda *c, const char *fmt, ...) {
    rlProf *p = c->prof;
    char name[PROF_NAME];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (p->n == PROF_EVENTS) cuda_prof_flush(c);
    int k = 0;
    while (k < p->n_kinds && strcmp(p->name[k], name)) k++;
    if (k == p->n_kinds) {
        if (k == PROF_KINDS) k = PROF_KINDS - 1;   /* the last slot collects the rest */
        else snprintf(p->name[p->n_kinds++], PROF_NAME, "%s", name);
    }
    p->calls[k]++;
    cudaEventRecord(p->ev[p->n], c->stream);
    p->kind[p->n++] = k;
}

void cuda_profile_report(rlBackend *be, FILE *f, const char *label, int steps) {
    rlCuda *c = cuda_of(be);
    rlProf *p = c->prof;
    if (!p) return;
    cuda_prof_flush(c);
    if (steps < 1) steps = 1;
    int order[PROF_KINDS];
    double total = 0;
    for (int k = 0; k < p->n_kinds; k++) order[k] = k, total += p->ms[k];
    for (int a = 1; a < p->n_kinds; a++)       /* most time first */
        for (int b = a; b > 0 && p->ms[order[b]] > p->ms[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    if (f) {
        fprintf(f, "profile, %s: device time per step (%d steps), gaps included\n", label,
                steps);
        fprintf(f, "  %-36s %9s %10s %6s\n", "operation", "calls", "ms/step", "%");
        for (int i = 0; i < p->n_kinds; i++) {
            int k = order[i];
            fprintf(f, "  %-36s %9.1f %10.4f %5.1f%%\n", p->name[k],
                    (double)p->calls[k] / steps, p->ms[k] / steps,
                    total > 0 ? 100 * p->ms[k] / total : 0);
        }
        fprintf(f, "  %-36s %9s %10.4f\n", "total", "", total / steps);
    }
    memset(p->ms, 0, sizeof p->ms);
    memset(p->calls, 0, sizeof p->calls);
    p->n_kinds = 0;
}

