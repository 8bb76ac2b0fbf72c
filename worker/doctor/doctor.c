/* doctor.c: the findings' format and count (see doctor.h). */
#include "worker/doctor/doctor.h"

#include <stdarg.h>
#include <string.h>

void doctor_init(rlDoctor *d, FILE *out) {
    memset(d, 0, sizeof(*d));
    d->out = out;
    d->p2p = d->nvlink = -1;
}

void doctor_line(rlDoctor *d, rlDocLevel level, rlErrorCode code, const char *topic,
                 const char *fmt, ...) {
    static const char *names[] = {"ok", "warn", "fail"};
    va_list ap;
    va_start(ap, fmt);
    fprintf(d->out, "%-5s %s: ", names[level], topic);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    fflush(d->out);
    va_end(ap);
    if (level == RL_DOC_OK) d->n_ok++;
    else if (level == RL_DOC_WARN) d->n_warn++;
    else {
        d->n_fail++;
        if (!d->first_fail) d->first_fail = code ? code : RL_EINTERNAL;
    }
}
