/* stop.c — stop strings across token boundaries, with held-back text (stop.h). */
#include "engine/sched/stop.h"

#include <string.h>

void stop_init(stop_matcher *m) { memset(m, 0, sizeof(*m)); }

int stop_add(stop_matcher *m, const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= STOP_LEN || m->n_stop == STOP_MAX) return -1;
    memcpy(m->stop[m->n_stop++], s, n + 1);
    return 0;
}

bool stop_feed(stop_matcher *r, const char *s, int n, char *out, int *out_len, int out_cap) {
    for (int i = 0; i < n; i++) {
        if (r->hold_len == (int)sizeof(r->hold)) { /* cannot happen: hold < longest stop */
            if (*out_len < out_cap) out[(*out_len)++] = r->hold[0];
            memmove(r->hold, r->hold + 1, (size_t)--r->hold_len);
        }
        r->hold[r->hold_len++] = s[i];
        for (int k = 0; k < r->n_stop; k++) {
            int L = (int)strlen(r->stop[k]);
            if (r->hold_len >= L && !memcmp(r->hold + r->hold_len - L, r->stop[k], (size_t)L)) {
                int keep = r->hold_len - L;
                memcpy(out + *out_len, r->hold, (size_t)(keep < out_cap - *out_len ? keep : out_cap - *out_len));
                *out_len += keep < out_cap - *out_len ? keep : out_cap - *out_len;
                r->hold_len = 0;
                return true;
            }
        }
        /* release the longest prefix of hold that no stop string can still complete */
        int rel = 0;
        for (; rel < r->hold_len; rel++) {
            bool maybe = false;
            for (int k = 0; k < r->n_stop && !maybe; k++) {
                int L = (int)strlen(r->stop[k]), m = r->hold_len - rel;
                if (m < L && !memcmp(r->hold + rel, r->stop[k], (size_t)m)) maybe = true;
            }
            if (maybe) break;
        }
        int take = rel < out_cap - *out_len ? rel : out_cap - *out_len;
        memcpy(out + *out_len, r->hold, (size_t)take);
        *out_len += take;
        memmove(r->hold, r->hold + rel, (size_t)(r->hold_len - rel));
        r->hold_len -= rel;
    }
    return false;
}

void stop_flush(stop_matcher *m, char *out, int *out_len, int out_cap) {
    int room = out_cap - *out_len;
    int take = m->hold_len < room ? m->hold_len : room;
    memcpy(out + *out_len, m->hold, (size_t)take);
    *out_len += take;
    m->hold_len = 0;
}
