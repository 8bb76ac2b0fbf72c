/* flags_help.c: what a user reads about the flags: --help, printed from the
 * same table the parser uses, and the closest spelling to an unknown one. */
#include <string.h>

#include "worker/lib/flags_impl.h"
#include "worker/lib/spelling.h"

#define FLAGS_HELP_COL 32

typedef struct flagsLeft {
    char buf[256];
    size_t off;
} flagsLeft;

static int flags_left_add(const char *s, size_t len, int negated, void *ctx) {
    flagsLeft *l = ctx;
    if (negated || l->off >= sizeof(l->buf)) return 0;   /* shown as --[no-]name */
    l->off += (size_t)snprintf(l->buf + l->off, sizeof(l->buf) - l->off, "%s%.*s",
                               l->off > 2 ? ", " : "", (int)len, s);
    return 0;
}

/* "  --tp, -tp, --tensor-parallel-size N" */
static void flags_left(const rlFlag *f, flagsLeft *l) {
    l->off = (size_t)snprintf(l->buf, sizeof(l->buf), "  ");
    flags_each_spelling(f, flags_left_add, l);
    if (f->negatable) {
        /* --name -> --[no-]name, for each long spelling */
        char tmp[256];
        size_t o = 0;
        for (const char *p = l->buf; *p && o + 6 < sizeof(tmp); p++) {
            if (p[0] == '-' && p[1] == '-' && (p == l->buf || p[-1] == ' ')) {
                memcpy(tmp + o, "--[no-]", 7);
                o += 7;
                p++;
                continue;
            }
            tmp[o++] = *p;
        }
        tmp[o] = 0;
        l->off = (size_t)snprintf(l->buf, sizeof(l->buf), "%s", tmp);
    }
    if (l->off >= sizeof(l->buf)) return;
    if (f->type == RL_FLAG_ENUM || f->type == RL_FLAG_ENUM_INT) {
        for (int i = 0, k = 0; f->choices[i].name && l->off < sizeof(l->buf); i++)
            if (!f->choices[i].canonical)
                l->off += (size_t)snprintf(l->buf + l->off, sizeof(l->buf) - l->off, "%c%s",
                                           k++ ? '|' : ' ', f->choices[i].name);
    } else if (f->arg) {
        l->off += (size_t)snprintf(l->buf + l->off, sizeof(l->buf) - l->off, " %s", f->arg);
    }
}

static void flags_help_text(FILE *out, const char *help) {
    for (const char *p = help ? help : ""; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(out, "%.*s\n", (int)n, p);
        p += n;
        if (*p == '\n' && *++p) fprintf(out, "%*s", FLAGS_HELP_COL, "");
    }
    if (!help || !*help) fputc('\n', out);
}

void flags_help(const rlFlags *fs, FILE *out) {
    if (fs->usage) fputs(fs->usage, out);
    for (int i = 0; i < fs->n; i++) {
        const rlFlag *f = &fs->f[i];
        if (f->type == RL_FLAG_SECTION) {
            fprintf(out, "\n%s\n", f->help);
            continue;
        }
        flagsLeft l;
        flags_left(f, &l);
        size_t len = strlen(l.buf);
        if (len + 2 <= FLAGS_HELP_COL) fprintf(out, "%-*s", FLAGS_HELP_COL, l.buf);
        else fprintf(out, "%s\n%*s", l.buf, FLAGS_HELP_COL, "");
        flags_help_text(out, f->help);
    }
    for (int pass = 0, first = 1; pass < 2; pass++)
        for (int r = 0; r < fs->n_rules; r++) {
            const rlFlagRule *ru = &fs->rules[r];
            if (ru->requires != pass) continue;
            if (first) fputc('\n', out), first = 0;
            if (ru->requires) fprintf(out, "%s only applies together with %s.\n", ru->a, ru->b);
            else fprintf(out, "%s and %s cannot be given together.\n", ru->a, ru->b);
        }
    if (fs->tail) fputs(fs->tail, out);
}

typedef struct flagsNear {
    const char *word;
    size_t len;
    int best;
    char *buf;
    size_t cap;
} flagsNear;

static int flags_near(const char *s, size_t len, int negated, void *ctx) {
    (void)negated;
    flagsNear *n = ctx;
    /* a spelling cut short is one edit away, however much is missing */
    int d = n->len >= 4 && n->len < len && !strncmp(s, n->word, n->len)
                ? 1 : spelling_distance(n->word, n->len, s, len);
    if (d < n->best) {
        n->best = d;
        snprintf(n->buf, n->cap, "%.*s", (int)len, s);
    }
    return 0;
}

const char *flags_closest(const rlFlags *fs, const char *word, char *buf, size_t len) {
    size_t wl = strcspn(word, "=");
    int most = spelling_most(wl);
    flagsNear n = {word, wl, most + 1, buf, len};
    for (int i = 0; i < fs->n; i++) flags_each_spelling(&fs->f[i], flags_near, &n);
    return n.best <= most ? buf : NULL;
}
