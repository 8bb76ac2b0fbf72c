/* files.c: command input and output files (see files.h). */
#include "worker/lib/files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *files_open_input(const char *path, const char *flag, rlError *err) {
    if (!strcmp(path, "-")) return stdin;
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || fstat(fileno(f), &st)) {
        rl_error(err, RL_EIO, "cannot read %s %s: %s", flag, path, strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(f);
        rl_error(err, RL_EINPUT, "%s %s is a directory; give a JSONL file (- for stdin)", flag, path);
        return NULL;
    }
    return f;
}

void files_close_input(FILE *f) {
    if (f && f != stdin) fclose(f);
}

int files_open_output(rlOutFile *o, const char *path, const char *flag, rlError *err) {
    memset(o, 0, sizeof(*o));
    o->path = path;
    o->flag = flag;
    if (!strcmp(path, "-")) {
        o->f = stdout;
        return 0;
    }
    struct stat st;
    if (!stat(path, &st) && S_ISDIR(st.st_mode))
        return rl_error(err, RL_EINPUT, "%s %s is a directory; give a file name (- for stdout)", flag, path);
    size_t n = strlen(path) + sizeof(".tmp-XXXXXX");
    if (!(o->tmp = malloc(n))) return rl_error(err, RL_EMEMORY, "out of memory");
    snprintf(o->tmp, n, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        rl_error(err, RL_EIO, "cannot create %s %s (as %s): %s", flag, path, o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    /* mkstemp makes it 0600; the file gets what a plain create would */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) || !(o->f = fdopen(fd, "w"))) {
        rl_error(err, RL_EIO, "cannot create %s %s: %s", flag, path, strerror(errno));
        close(fd);
        files_discard_output(o);
        return -1;
    }
    return 0;
}

/* Flush and close (a file); -1 with err set when a write failed. */
static int files_finish(rlOutFile *o, rlError *err) {
    int bad = fflush(o->f) || ferror(o->f);
    if (o->tmp) bad |= fclose(o->f) != 0;
    o->f = NULL;
    if (bad) rl_error(err, RL_EIO, "writing %s %s failed: %s", o->flag, o->path, strerror(errno));
    return bad ? -1 : 0;
}

int files_commit_output(rlOutFile *o, rlError *err) {
    if (files_finish(o, err)) {
        files_discard_output(o);
        return -1;
    }
    if (o->tmp && rename(o->tmp, o->path)) {
        rl_error(err, RL_EIO, "renaming %s to %s %s failed: %s", o->tmp, o->flag, o->path, strerror(errno));
        files_discard_output(o);
        return -1;
    }
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

int files_keep_partial(rlOutFile *o, char *where, size_t n, rlError *err) {
    if (files_finish(o, err)) {
        files_discard_output(o);
        return -1;
    }
    if (!o->tmp) {
        snprintf(where, n, "stdout");
        return 0;
    }
    snprintf(where, n, "%s.partial", o->path);
    if (rename(o->tmp, where)) {
        rl_error(err, RL_EIO, "renaming %s to %s failed: %s", o->tmp, where, strerror(errno));
        files_discard_output(o);
        return -1;
    }
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

void files_discard_output(rlOutFile *o) {
    if (o->f && o->f != stdout) fclose(o->f);
    else if (o->f) fflush(o->f);
    o->f = NULL;
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
}
