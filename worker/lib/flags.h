/* flags.h: the one command-line parser every `redlm` command declares its
 * flags in, so all of them accept the same spellings (`--flag value`,
 * `--flag=value`, aliases such as vLLM's names), read numbers and sizes by
 * the same rules, print --help from the same table and refuse a bad flag
 * with the same words.
 *
 * A command fills an rlFlags with its flags (each bound to the variable it
 * sets), the pairs that may not be given together, then calls flags_main.
 *
 * Values:
 *   whole numbers and numbers  checked against the flag's range
 *   sizes (memory)   bytes: a bare number is bytes; KiB MiB GiB TiB and
 *                    K M G T are binary (powers of 1024), KB MB GB TB decimal
 *                    (powers of 1000), case ignored; a bare number under
 *                    1 MiB is refused with a hint ("did you mean 24GiB?"),
 *                    since it is almost always a forgotten unit
 *   enums            one of a list of spellings, stored as its canonical name
 *   lists            comma-separated whole numbers (`14,14`); a set (device
 *                    ids) also takes ranges (`0-5`, `0-2,6`), each id once
 *   booleans         take no value; a negatable one also has `--no-NAME`
 * `-` is a value like any other (stdin / stdout for file flags).  A flag
 * given twice keeps its last value. */
#ifndef RL_FLAGS_H
#define RL_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/error.h"

typedef enum rlFlagType {
    RL_FLAG_BOOL,       /* int *: 1 when given, 0 for its --no- form */
    RL_FLAG_INT,        /* int *, in [lo, hi] */
    RL_FLAG_LONG,       /* long long *, in [lo, hi] */
    RL_FLAG_U64,        /* uint64_t *, any 64-bit value (seeds) */
    RL_FLAG_DOUBLE,     /* double *, in [lo, hi]; (lo, hi] with lo_open */
    RL_FLAG_SIZE,       /* size_t *, bytes, at least lo */
    RL_FLAG_STRING,     /* const char *, pointing into argv */
    RL_FLAG_ENUM,       /* const char *: the canonical name of the choice given */
    RL_FLAG_ENUM_INT,   /* int *: the value of the choice given */
    RL_FLAG_LIST,       /* int[max] and *count: whole numbers in [lo, hi] */
    RL_FLAG_SECTION     /* not a flag: a heading in --help */
} rlFlagType;

/* One accepted spelling of an enum flag's value. */
typedef struct rlFlagChoice {
    const char *name;       /* as typed: "bfloat16" */
    const char *canonical;  /* stored for RL_FLAG_ENUM; NULL: name itself */
    int value;              /* stored for RL_FLAG_ENUM_INT */
} rlFlagChoice;

typedef struct rlFlag {
    rlFlagType type;
    const char *name;       /* "--tensor-parallel-size" style; the main spelling */
    const char *aliases;    /* other spellings, space-separated ("-tp --tp"), or NULL */
    const char *arg;        /* the value's name in --help ("N", "DIR"); enums: their choices */
    const char *help;       /* '\n' starts another line */
    void *dst;
    double lo, hi;          /* ranges (LIST: of each entry; SIZE: lo is the least) */
    const rlFlagChoice *choices;   /* ENUM: ended by a {NULL} entry */
    const char *refusal;    /* ENUM: said of a value that is not a choice, instead of listing
                             * them (another program's values this one does not take);
                             * INT: said after the range, of a value outside it */
    int *count, max;        /* LIST: entries stored, room in dst */
    unsigned negatable : 1; /* BOOL: --no-NAME sets 0 */
    unsigned lo_open : 1;   /* DOUBLE: lo itself is outside the range */
    unsigned set : 1;       /* LIST: ids, each once; a-b stands for a, a+1, ... b */
    unsigned required : 1;
    int given;              /* set by the parser: how often it was given */
} rlFlag;

#define RL_FLAGS_MAX 64
#define RL_FLAGS_RULES 16

typedef struct rlFlagRule {
    const char *a, *b;
    int requires;           /* 0: a and b exclude each other; 1: a only with b */
} rlFlagRule;

/* An option of another tool (vLLM's) that a command does not take, with
 * what to do instead: refused as "unknown option X: hint". */
typedef struct rlFlagForeign {
    const char *names;      /* its spellings, space-separated ("--data-parallel-size -dp") */
    const char *hint;
} rlFlagForeign;

typedef struct rlFlags {
    const char *cmd;        /* "generate": messages begin "redlm generate: " */
    const char *usage;      /* --help: printed before the table */
    const char *tail;       /* --help: printed after it, or NULL */
    const char *unknown_hint;   /* after "unknown option X" when no flag is close */
    const rlFlagForeign *foreign;   /* ended by {NULL}; checked before the closest flag */
    int dashdash;           /* 1: "--" ends the options, the rest is left in rest */
    char **rest;
    int n_rest;
    rlFlag f[RL_FLAGS_MAX];
    int n;
    rlFlagRule rules[RL_FLAGS_RULES];
    int n_rules;
    int overflow;           /* more flags or rules than fit: a bug, reported by the parse */
} rlFlags;

void flags_init(rlFlags *fs, const char *cmd, const char *usage);

/* Declare a flag; the returned entry may be adjusted (aliases, required,
 * negatable ...) before the parse.  Never NULL: when the table is full the
 * parse reports it. */
rlFlag *flags_add(rlFlags *fs, rlFlag f);
rlFlag *flags_bool(rlFlags *fs, const char *name, int *dst, const char *help);
rlFlag *flags_int(rlFlags *fs, const char *name, int *dst, long long lo, long long hi,
                  const char *arg, const char *help);
rlFlag *flags_long(rlFlags *fs, const char *name, long long *dst, long long lo, long long hi,
                   const char *arg, const char *help);
rlFlag *flags_u64(rlFlags *fs, const char *name, uint64_t *dst, const char *arg,
                  const char *help);
rlFlag *flags_double(rlFlags *fs, const char *name, double *dst, double lo, int lo_open,
                     double hi, const char *arg, const char *help);
rlFlag *flags_size(rlFlags *fs, const char *name, size_t *dst, size_t least, const char *help);
rlFlag *flags_string(rlFlags *fs, const char *name, const char **dst, const char *arg,
                     const char *help);
rlFlag *flags_enum(rlFlags *fs, const char *name, const char **dst,
                   const rlFlagChoice *choices, const char *help);
rlFlag *flags_enum_int(rlFlags *fs, const char *name, int *dst, const rlFlagChoice *choices,
                       const char *help);
rlFlag *flags_list(rlFlags *fs, const char *name, int *dst, int max, int *count, int lo,
                   int hi, int set, const char *arg, const char *help);
void flags_section(rlFlags *fs, const char *title);

/* a and b may not be given together. */
void flags_conflict(rlFlags *fs, const char *a, const char *b);
/* a may only be given together with b. */
void flags_requires(rlFlags *fs, const char *a, const char *b);

/* Parse argv[1..argc-1] (argv[0] is the command's name).  0: parsed;
 * 1: --help or -h was asked (nothing else checked); -1: err (RL_EUSAGE, or
 * RL_EINTERNAL for a table that overflowed). */
int flags_parse(rlFlags *fs, int argc, char **argv, rlError *err);

/* flags_parse for a command's front door: returns -1 when the command
 * should go on, else its exit status after printing the help (0) or the
 * error ("redlm CMD: ...", 2). */
int flags_main(rlFlags *fs, int argc, char **argv);

void flags_help(const rlFlags *fs, FILE *f);

/* How often flag `name` (any of its spellings) was given. */
int flags_given(const rlFlags *fs, const char *name);

/* The flag argv word `arg` names (`--tp`, `-tp=2`, `--no-x`), or NULL. */
const rlFlag *flags_find(const rlFlags *fs, const char *arg);

/* A memory size by the rules above, at least `least` bytes. */
int flags_parse_size(const char *flag, const char *s, size_t least, size_t *out, rlError *err);

#endif
