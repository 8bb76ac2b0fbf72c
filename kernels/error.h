/* error.h: errors returned as values, with a message a user can act on.
 *
 * Every function that can fail takes an rlError * as its last argument and
 * returns -1 (or NULL) after filling it; the caller decides whether to print
 * it, wrap it with context, or turn it into a reply event.  The code selects
 * the process exit status when an error ends a command, so scripts can tell a
 * broken model directory from an unreachable Redis without parsing text. */
#ifndef RL_ERROR_H
#define RL_ERROR_H

#include <stddef.h>

#define RL_ERROR_LEN 2048

typedef enum rlErrorCode {
    RL_OK = 0,
    RL_EINTERNAL = 1,   /* a bug or an unexpected library failure */
    RL_EUSAGE = 2,      /* bad command line */
    RL_EMODEL = 3,      /* model directory, config or weights unusable */
    RL_EINPUT = 4,      /* bad input file or request */
    RL_EMEMORY = 5,     /* does not fit in host or device memory */
    RL_EDEVICE = 6,     /* GPU missing, busy or failing */
    RL_ECOMM = 7,       /* NCCL / collective set-up or time-out */
    RL_EREDIS = 8,      /* Redis unreachable or refusing */
    RL_EIO = 9          /* reading or writing a file failed */
} rlErrorCode;

typedef struct rlError {
    rlErrorCode code;
    char msg[RL_ERROR_LEN];
} rlError;

/* Fill err (when not NULL) and return -1, so failures read
 * `return rl_error(err, RL_EMODEL, "...", ...);`. */
int rl_error(rlError *err, rlErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the message already in err with more context ("loading X: ..."). */
int rl_error_wrap(rlError *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
