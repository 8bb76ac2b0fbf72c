/* error.c: filling rlError values; see error.h for the convention. */
#include "kernels/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rl_error(rlError *err, rlErrorCode code, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    err->code = code;
    return -1;
}

int rl_error_wrap(rlError *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[512], old[RL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    /* Truncation keeps the start, which holds the most specific context. */
    int n = snprintf(err->msg, sizeof(err->msg), "%s: ", prefix);
    if (n < 0 || (size_t)n >= sizeof(err->msg)) return -1;
    strncat(err->msg, old, sizeof(err->msg) - (size_t)n - 1);
    return -1;
}
