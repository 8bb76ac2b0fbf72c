/* flags.c: declaring flags and the parse loop (see flags.h): which flag an
 * argument names, where its value is, and the rules between flags. */
#include "worker/lib/flags.h"

#include <string.h>

#include "worker/lib/flags_impl.h"

void flags_init(rlFlags *fs, const char *cmd, const char *usage) {
    memset(fs, 0, sizeof(*fs));
    fs->cmd = cmd;
    fs->usage = usage;
}

rlFlag *flags_add(rlFlags *fs, rlFlag f) {
    static rlFlag spare;        /* takes the writes to a flag that did not fit */
    if (fs->n == RL_FLAGS_MAX) {
        fs->overflow = 1;
        memset(&spare, 0, sizeof(spare));
        return &spare;
    }
    fs->f[fs->n] = f;
    return &fs->f[fs->n++];
}

rlFlag *flags_bool(rlFlags *fs, const char *name, int *dst, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_BOOL, .name = name, .help = help, .dst = dst});
}

rlFlag *flags_int(rlFlags *fs, const char *name, int *dst, long long lo, long long hi,
                  const char *arg, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_INT, .name = name, .arg = arg, .help = help,
                                  .dst = dst, .lo = (double)lo, .hi = (double)hi});
}

rlFlag *flags_long(rlFlags *fs, const char *name, long long *dst, long long lo, long long hi,
                   const char *arg, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_LONG, .name = name, .arg = arg, .help = help,
                                  .dst = dst, .lo = (double)lo, .hi = (double)hi});
}

rlFlag *flags_u64(rlFlags *fs, const char *name, uint64_t *dst, const char *arg,
                  const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_U64, .name = name, .arg = arg, .help = help,
                                  .dst = dst});
}

rlFlag *flags_double(rlFlags *fs, const char *name, double *dst, double lo, int lo_open,
                     double hi, const char *arg, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_DOUBLE, .name = name, .arg = arg, .help = help,
                                  .dst = dst, .lo = lo, .hi = hi, .lo_open = lo_open != 0});
}

rlFlag *flags_size(rlFlags *fs, const char *name, size_t *dst, size_t least, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_SIZE, .name = name, .arg = "SIZE",
                                  .help = help, .dst = dst, .lo = (double)least});
}

rlFlag *flags_string(rlFlags *fs, const char *name, const char **dst, const char *arg,
                     const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_STRING, .name = name, .arg = arg, .help = help,
                                  .dst = dst});
}

rlFlag *flags_enum(rlFlags *fs, const char *name, const char **dst,
                   const rlFlagChoice *choices, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_ENUM, .name = name, .help = help, .dst = dst,
                                  .choices = choices});
}

rlFlag *flags_enum_int(rlFlags *fs, const char *name, int *dst, const rlFlagChoice *choices,
                       const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_ENUM_INT, .name = name, .help = help,
                                  .dst = dst, .choices = choices});
}

rlFlag *flags_list(rlFlags *fs, const char *name, int *dst, int max, int *count, int lo,
                   int hi, int set, const char *arg, const char *help) {
    return flags_add(fs, (rlFlag){.type = RL_FLAG_LIST, .name = name, .arg = arg, .help = help,
                                  .dst = dst, .max = max, .count = count, .lo = lo, .hi = hi,
                                  .set = set != 0});
}

void flags_section(rlFlags *fs, const char *title) {
    flags_add(fs, (rlFlag){.type = RL_FLAG_SECTION, .name = "", .help = title});
}

static void flags_rule(rlFlags *fs, const char *a, const char *b, int requires) {
    if (fs->n_rules == RL_FLAGS_RULES) {
        fs->overflow = 1;
        return;
    }
    fs->rules[fs->n_rules++] = (rlFlagRule){a, b, requires};
}

void flags_conflict(rlFlags *fs, const char *a, const char *b) { flags_rule(fs, a, b, 0); }
void flags_requires(rlFlags *fs, const char *a, const char *b) { flags_rule(fs, a, b, 1); }

int flags_each_spelling(const rlFlag *f,
                        int (*fn)(const char *s, size_t len, int negated, void *ctx), void *ctx) {
    if (f->type == RL_FLAG_SECTION) return 0;
    for (int neg = 0; neg <= (f->negatable ? 1 : 0); neg++) {
        const char *s = f->name;
        size_t len = strlen(s);
        const char *next = f->aliases;
        for (;;) {
            if (!neg) {
                if (fn(s, len, 0, ctx)) return 1;
            } else if (len > 2 && len < 120 && !strncmp(s, "--", 2)) {
                char buf[128] = "--no-";
                memcpy(buf + 5, s + 2, len - 2);
                if (fn(buf, len + 3, 1, ctx)) return 1;
            }
            if (!next) break;
            while (*next == ' ') next++;
            if (!*next) break;
            s = next;
            len = strcspn(s, " ");
            next = s + len;
        }
    }
    return 0;
}

typedef struct flagsMatch {
    const char *word;
    size_t len;
    int negated;
} flagsMatch;

static int flags_match(const char *s, size_t len, int negated, void *ctx) {
    flagsMatch *m = ctx;
    if (len != m->len || strncmp(s, m->word, len)) return 0;
    m->negated = negated;
    return 1;
}

/* The flag `arg` names ("--x" or "--x=v"), whether in its --no- form, and
 * where the value after '=' starts (NULL when none). */
static rlFlag *flags_lookup(const rlFlags *fs, const char *arg, int *negated, const char **value) {
    const char *eq = strchr(arg, '=');
    flagsMatch m = {arg, eq ? (size_t)(eq - arg) : strlen(arg), 0};
    for (int i = 0; i < fs->n; i++)
        if (flags_each_spelling(&fs->f[i], flags_match, &m)) {
            if (negated) *negated = m.negated;
            if (value) *value = eq ? eq + 1 : NULL;
            return (rlFlag *)&fs->f[i];
        }
    return NULL;
}

const rlFlag *flags_find(const rlFlags *fs, const char *arg) {
    return flags_lookup(fs, arg, NULL, NULL);
}

int flags_given(const rlFlags *fs, const char *name) {
    const rlFlag *f = flags_find(fs, name);
    return f ? f->given : 0;
}

static int flags_is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* A foreign option spelled a[0..len), or NULL. */
static const rlFlagForeign *flags_foreign(const rlFlags *fs, const char *a, size_t len) {
    for (const rlFlagForeign *f = fs->foreign; f && f->names; f++)
        for (const char *p = f->names; *p;) {
            size_t n = strcspn(p, " ");
            if (n == len && !strncmp(p, a, len)) return f;
            p += n + (p[n] == ' ');
        }
    return NULL;
}

static int flags_unknown(const rlFlags *fs, const char *a, rlError *err) {
    size_t len = strcspn(a, "=");
    const rlFlagForeign *f = flags_foreign(fs, a, len);
    if (f) return rl_error(err, RL_EUSAGE, "unknown option %.*s: %s", (int)len, a, f->hint);
    char near[128];
    const char *s = flags_closest(fs, a, near, sizeof(near));
    if (s) return rl_error(err, RL_EUSAGE, "unknown option %.*s (did you mean %s?)", (int)len, a, s);
    if (fs->unknown_hint)
        return rl_error(err, RL_EUSAGE, "unknown option %.*s (%s)", (int)len, a, fs->unknown_hint);
    return rl_error(err, RL_EUSAGE, "unknown option %.*s (redlm %s --help lists the options)",
                    (int)len, a, fs->cmd);
}

/* The value of flag f spelled `spelled`: after '=', else the next argument,
 * which must not itself be an option of this command. */
static int flags_value(const rlFlags *fs, int argc, char **argv, int *i, const char *spelled,
                       const char **value, rlError *err) {
    if (*value) return 0;
    if (*i + 1 >= argc) return rl_error(err, RL_EUSAGE, "%s needs a value", spelled);
    const char *next = argv[*i + 1];
    if (flags_is_help(next) || flags_lookup(fs, next, NULL, NULL))
        return rl_error(err, RL_EUSAGE,
                        "%s needs a value, but %s is an option (to pass it as the value, "
                        "write %s=%s)", spelled, next, spelled, next);
    *value = next;
    (*i)++;
    return 0;
}

static int flags_check_rules(const rlFlags *fs, rlError *err) {
    for (int r = 0; r < fs->n_rules; r++) {
        const rlFlagRule *ru = &fs->rules[r];
        int a = flags_given(fs, ru->a), b = flags_given(fs, ru->b);
        if (!ru->requires && a && b)
            return rl_error(err, RL_EUSAGE, "%s and %s cannot be given together: choose one",
                            ru->a, ru->b);
        if (ru->requires && a && !b)
            return rl_error(err, RL_EUSAGE, "%s only applies together with %s", ru->a, ru->b);
    }
    for (int k = 0; k < fs->n; k++)
        if (fs->f[k].required && !fs->f[k].given)
            return rl_error(err, RL_EUSAGE, "%s is required (redlm %s --help)", fs->f[k].name,
                            fs->cmd);
    return 0;
}

int flags_parse(rlFlags *fs, int argc, char **argv, rlError *err) {
    if (fs->overflow)
        return rl_error(err, RL_EINTERNAL, "redlm %s declares more flags or rules than "
                        "worker/lib/flags.h has room for", fs->cmd);
    for (int i = 1; i < argc && !(fs->dashdash && !strcmp(argv[i], "--")); i++)
        if (flags_is_help(argv[i])) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (fs->dashdash && !strcmp(a, "--")) {
            fs->rest = argv + i + 1;
            fs->n_rest = argc - i - 1;
            break;
        }
        if (a[0] != '-' || !a[1])
            return rl_error(err, RL_EUSAGE, "unexpected argument '%s': options are spelled "
                            "--name value or --name=value (redlm %s --help)", a, fs->cmd);
        int negated = 0;
        const char *value = NULL;
        rlFlag *f = flags_lookup(fs, a, &negated, &value);
        if (!f) return flags_unknown(fs, a, err);
        char spelled[128];
        snprintf(spelled, sizeof(spelled), "%.*s", (int)strcspn(a, "="), a);
        if (f->type == RL_FLAG_BOOL) {
            if (value)
                return rl_error(err, RL_EUSAGE, "%s takes no value (give it alone%s)", spelled,
                                f->negatable && !negated ? ", or its --no- form to turn it off"
                                                         : "");
            *(int *)f->dst = !negated;
        } else if (flags_value(fs, argc, argv, &i, spelled, &value, err) ||
                   flags_set(f, spelled, value, err)) {
            return -1;
        }
        f->given++;
    }
    return flags_check_rules(fs, err);
}

int flags_main(rlFlags *fs, int argc, char **argv) {
    rlError err = {0};
    int rc = flags_parse(fs, argc, argv, &err);
    if (rc == 1) {
        flags_help(fs, stdout);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "redlm %s: %s\n", fs->cmd, err.msg);
        return err.code;
    }
    return -1;
}
