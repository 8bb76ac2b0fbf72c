/* files.h: the input and output files of the commands, one rule for all.
 *
 * "-" is stdin or stdout.  An input must be a file (a directory is an
 * error, not zero lines).  An output file is written under a temporary
 * name in its own folder and renamed over the real one only when the run
 * is complete, so a run that fails to start, fails midway or is killed
 * never destroys an older file; an interrupted run's results can be kept
 * beside it as NAME.partial. */
#ifndef RL_FILES_H
#define RL_FILES_H

#include <stdio.h>

#include "kernels/error.h"

/* flag names the command-line flag in messages ("--input"). */
FILE *files_open_input(const char *path, const char *flag, rlError *err);
void files_close_input(FILE *f);

typedef struct rlOutFile {
    FILE *f;                    /* write here */
    const char *path;           /* the final name, or "-" */
    const char *flag;
    char *tmp;                  /* the temporary name; NULL for stdout */
} rlOutFile;

int files_open_output(rlOutFile *o, const char *path, const char *flag, rlError *err);
/* Flush and, for a file, rename the temporary over the final name. */
int files_commit_output(rlOutFile *o, rlError *err);
/* Flush and, for a file, rename the temporary to NAME.partial, whose name
 * is put in where (bytes); the final name is left as it was. */
int files_keep_partial(rlOutFile *o, char *where, size_t n, rlError *err);
/* After a failure: the temporary is removed, the final name untouched. */
void files_discard_output(rlOutFile *o);

#endif
