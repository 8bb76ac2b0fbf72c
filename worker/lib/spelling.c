/* spelling.c: edit distance and the close matches of a misspelt name (see
 * spelling.h). */
#include "worker/lib/spelling.h"

#include <stdio.h>
#include <string.h>

int spelling_distance(const char *a, size_t la, const char *b, size_t lb) {
    enum { N = 64 };
    if (la >= N || lb >= N) return N;
    int d[N][N];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

int spelling_near(const char *word, const char *const *names, int n, char *buf, size_t cap) {
    size_t wl = strlen(word);
    int most = spelling_most(wl), listed = 0;
    for (int d = 0; d <= most; d++)
        for (int i = 0; i < n; i++) {
            if (spelling_distance(word, wl, names[i], strlen(names[i])) != d) continue;
            size_t at = strlen(buf);
            snprintf(buf + at, cap - at, "%s'%s'", listed++ ? ", " : "", names[i]);
        }
    return listed;
}
