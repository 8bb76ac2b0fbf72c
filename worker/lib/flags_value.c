/* flags_value.c: reading one flag's value by its type (see flags.h): the
 * one home of the rules for whole numbers, numbers, sizes, enums and lists,
 * and of the words that refuse a bad one. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/lib/flags_impl.h"

#define MiB (1024.0 * 1024.0)

/* strtoll and friends skip blanks and take signs and hex prefixes: a value
 * is digits, an optional leading minus and nothing else. */
static int flags_digits(const char *s, int sign_ok) {
    if (sign_ok && *s == '-') s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
    return *s == 0;
}

static int flags_whole(const rlFlag *f, const char *spelled, const char *v, long long *out,
                       rlError *err) {
    errno = 0;
    long long x = flags_digits(v, 1) ? strtoll(v, NULL, 10) : 0;
    if (!flags_digits(v, 1) || errno || (double)x < f->lo || (double)x > f->hi)
        return rl_error(err, RL_EUSAGE, "%s '%s' must be a whole number from %.0f to %.0f%s%s",
                        spelled, v, f->lo, f->hi, f->refusal ? "; " : "",
                        f->refusal ? f->refusal : "");
    *out = x;
    return 0;
}

static int flags_read_u64(const char *spelled, const char *v, uint64_t *out, rlError *err) {
    errno = 0;
    unsigned long long x = flags_digits(v, 0) ? strtoull(v, NULL, 10) : 0;
    if (!flags_digits(v, 0) || errno)
        return rl_error(err, RL_EUSAGE, "%s '%s' must be a whole number from 0 to %llu", spelled,
                        v, (unsigned long long)UINT64_MAX);
    *out = x;
    return 0;
}

static int flags_number(const rlFlag *f, const char *spelled, const char *v, double *out,
                        rlError *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int ok = (isdigit((unsigned char)*v) || *v == '-' || *v == '.') && end != v && !*end &&
             !errno && isfinite(x) && (f->lo_open ? x > f->lo : x >= f->lo) && x <= f->hi;
    if (ok) {
        *out = x;
        return 0;
    }
    if (isinf(f->hi) && f->lo == 0 && f->lo_open)
        return rl_error(err, RL_EUSAGE, "%s '%s' must be a positive number", spelled, v);
    if (isinf(f->hi))
        return rl_error(err, RL_EUSAGE, "%s '%s' must be a number %s %.6g", spelled, v,
                        f->lo_open ? "above" : "of at least", f->lo);
    return rl_error(err, RL_EUSAGE, "%s '%s' must be a number %s %.6g and at most %.6g", spelled,
                    v, f->lo_open ? "above" : "from", f->lo, f->hi);
}

int flags_parse_size(const char *flag, const char *s, size_t least, size_t *out, rlError *err) {
    static const struct { const char *unit; double mul; } units[] = {
        {"", 1}, {"B", 1},
        {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3},
        {"M", MiB}, {"MiB", MiB}, {"MB", 1e6},
        {"G", MiB * 1024}, {"GiB", MiB * 1024}, {"GB", 1e9},
        {"T", MiB * MiB}, {"TiB", MiB * MiB}, {"TB", 1e12},
    };
    char *end;
    errno = 0;
    double x = isdigit((unsigned char)*s) ? strtod(s, &end) : -1;
    if (x < 0 || errno || !isfinite(x))
        goto bad;
    const char *unit = end + (*end == ' ');
    double mul = 0;
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++)
        if (!strcasecmp(unit, units[k].unit)) mul = units[k].mul;
    if (!mul) goto bad;
    if (mul == 1 && x != floor(x))
        return rl_error(err, RL_EUSAGE, "%s '%s': a number without a unit is bytes, a whole "
                        "number of them; or give a unit, e.g. %sGiB", flag, s, s);
    if (!*unit && x < MiB)
        return rl_error(err, RL_EUSAGE, "%s %s: a number without a unit is bytes, and %s bytes "
                        "is less than 1 MiB; did you mean %sGiB?", flag, s, s, s);
    double bytes = floor(x * mul);
    if (bytes > 1e18)
        return rl_error(err, RL_EUSAGE, "%s '%s' is more than any machine's memory", flag, s);
    if (bytes < (double)least) {
        /* the least in the largest unit that writes it whole */
        size_t unit = least % ((size_t)1 << 30) == 0 ? (size_t)1 << 30
                      : least % ((size_t)1 << 20) == 0 ? (size_t)1 << 20 : 1;
        return rl_error(err, RL_EUSAGE, "%s '%s' is less than the least it can be, %zu %s", flag,
                        s, least / unit, unit == 1 ? "bytes" : unit == (size_t)1 << 20 ? "MiB" : "GiB");
    }
    *out = (size_t)bytes;
    return 0;
bad:
    return rl_error(err, RL_EUSAGE, "%s '%s' is not a size: give bytes, or a number with a "
                    "unit: KiB MiB GiB TiB (K M G T too) are powers of 1024, KB MB GB TB powers "
                    "of 1000, e.g. 24GiB", flag, s);
}

/* "cpu or cuda", "auto, bf16, fp16 or fp32 (also bfloat16, ...)". */
static void flags_choices_text(const rlFlagChoice *c, char *buf, size_t len) {
    size_t off = 0;
    int n_canon = 0, n_alias = 0;
    for (int i = 0; c[i].name; i++) n_canon += !c[i].canonical;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0, k = 0; c[i].name && off < len; i++) {
            if (!pass && c[i].canonical) continue;
            if (pass && !c[i].canonical) continue;
            const char *sep = pass ? (n_alias++ ? ", " : " (also ")
                                   : (k++ == 0 ? "" : k == n_canon ? " or " : ", ");
            off += (size_t)snprintf(buf + off, len - off, "%s%s", sep, c[i].name);
        }
    if (n_alias && off < len) snprintf(buf + off, len - off, ")");
}

static int flags_choice(const rlFlag *f, const char *spelled, const char *v, rlError *err) {
    for (int i = 0; f->choices[i].name; i++) {
        const rlFlagChoice *c = &f->choices[i];
        if (strcmp(v, c->name)) continue;
        if (f->type == RL_FLAG_ENUM) *(const char **)f->dst = c->canonical ? c->canonical : c->name;
        else *(int *)f->dst = c->value;
        return 0;
    }
    if (f->refusal) return rl_error(err, RL_EUSAGE, "%s '%s': %s", spelled, v, f->refusal);
    char text[512];
    flags_choices_text(f->choices, text, sizeof(text));
    return rl_error(err, RL_EUSAGE, "%s '%s' is not a choice: give %s", spelled, v, text);
}

/* "14,14"; a set: "0-5", "0,2,4", "0-2,6,7", each id once. */
static int flags_read_list(const rlFlag *f, const char *spelled, const char *s, rlError *err) {
    int *out = f->dst, n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long a = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1, b = a;
        if (a < 0 || errno || a < f->lo || a > f->hi) goto bad;
        p = end;
        if (*p == '-' && f->set) {
            b = isdigit((unsigned char)p[1]) ? strtol(++p, &end, 10) : -1;
            if (b < a || errno || b > f->hi) goto bad;
            p = end;
        }
        if (*p == ',') {
            if (!*++p) goto bad;
        } else if (*p) {
            goto bad;
        }
        for (long v = a; v <= b; v++) {
            if (n == f->max)
                return rl_error(err, RL_EUSAGE, "%s '%s' lists more than %d entries", spelled, s,
                                f->max);
            for (int k = 0; f->set && k < n; k++)
                if (out[k] == v)
                    return rl_error(err, RL_EUSAGE,
                                    "%s '%s' lists %ld twice: each entry may appear once",
                                    spelled, s, v);
            out[n++] = (int)v;
        }
    }
    if (n == 0) goto bad;
    *f->count = n;
    return 0;
bad:
    return rl_error(err, RL_EUSAGE, "%s '%s' is not a list of numbers from %.0f to %.0f: write "
                    "e.g. %s", spelled, s, f->lo, f->hi, f->set ? "0,1,2 or 0-5 or 0-2,6" : "14,14");
}

int flags_set(rlFlag *f, const char *spelled, const char *v, rlError *err) {
    long long x;
    switch (f->type) {
    case RL_FLAG_INT:
        if (flags_whole(f, spelled, v, &x, err)) return -1;
        *(int *)f->dst = (int)x;
        return 0;
    case RL_FLAG_LONG:
        return flags_whole(f, spelled, v, (long long *)f->dst, err);
    case RL_FLAG_U64:
        return flags_read_u64(spelled, v, (uint64_t *)f->dst, err);
    case RL_FLAG_DOUBLE:
        return flags_number(f, spelled, v, (double *)f->dst, err);
    case RL_FLAG_SIZE:
        return flags_parse_size(spelled, v, (size_t)f->lo, (size_t *)f->dst, err);
    case RL_FLAG_STRING:
        if (!*v) return rl_error(err, RL_EUSAGE, "%s is empty: give a value", spelled);
        *(const char **)f->dst = v;
        return 0;
    case RL_FLAG_ENUM:
    case RL_FLAG_ENUM_INT:
        return flags_choice(f, spelled, v, err);
    case RL_FLAG_LIST:
        return flags_read_list(f, spelled, v, err);
    default:
        return rl_error(err, RL_EINTERNAL, "%s has no value type", spelled);
    }
}
