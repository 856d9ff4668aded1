/* suggest.c — closest-name suggestions (see suggest.h). */
#include "policy/suggest.h"

#include <ctype.h>
#include <string.h>

size_t pol_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40) return 99;
    size_t row[41];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            size_t best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *pol_suggest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    size_t bd = 3;
    for (int i = 0; i < n; i++) {
        size_t d = pol_edit_distance(word, names[i]);
        if (d < bd) bd = d, best = names[i];
    }
    return best;
}
