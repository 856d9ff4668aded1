/* datadir.c — the installed data folder (see datadir.h). The paths come from
 * meson (cli/meson.build): why not embed the pages in the binary instead? The
 * pages and uPlot are plain files an operator may read, patch or replace
 * (--web-root), the gateway serves files from disk with sendfile, and a
 * meson-installed tree is what distributions package. */
#include "cli/datadir.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SPECD_DATADIR
#define SPECD_DATADIR "/usr/local/share/specd"
#endif
#ifndef SPECD_BIN_TO_DATADIR
#define SPECD_BIN_TO_DATADIR "../share/specd" /* "" = bindir is absolute: not relocatable */
#endif
#ifndef SPECD_BUILD_ROOT
#define SPECD_BUILD_ROOT ""
#endif
#ifndef SPECD_SOURCE_ROOT
#define SPECD_SOURCE_ROOT ""
#endif

/* Whether path + probe (a suffix such as "/index.html", or "") is readable. */
static bool readable(const char *path, const char *probe) {
    char p[PATH_MAX + 96];
    size_t n = strlen(path), m = strlen(probe);
    if (n + m + 1 > sizeof p) return false;
    memcpy(p, path, n);
    memcpy(p + n, probe, m + 1);
    return access(p, R_OK) == 0;
}

/* The folder of the running executable (realpath), or "" */
static void exe_dir(char *out, size_t len) {
    char exe[PATH_MAX];
    out[0] = 0;
    if (!realpath("/proc/self/exe", exe)) return;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = 0;
    snprintf(out, len, "%s", exe);
}

/* Whether dir is under the meson build tree this binary was built in. */
static bool in_build_tree(const char *dir) {
    char root[PATH_MAX];
    if (!SPECD_BUILD_ROOT[0] || !realpath(SPECD_BUILD_ROOT, root)) return false;
    size_t n = strlen(root);
    return !strncmp(dir, root, n) && (dir[n] == '/' || !dir[n]);
}

/* The first readable path among: the source tree's src_rel (build-tree
 * binary only), BINDIR/../DATADIR/specd/data_rel, DATADIR/specd/data_rel;
 * probe names a file that must exist inside it ("" = the path itself). */
static int find_data(const char *src_rel, const char *data_rel, const char *probe, char *out, size_t len) {
    char dir[PATH_MAX], cand[3][PATH_MAX + 64];
    int nc = 0;
    exe_dir(dir, sizeof dir);
    if (dir[0] && in_build_tree(dir) && SPECD_SOURCE_ROOT[0])
        snprintf(cand[nc++], sizeof cand[0], "%s/%s", SPECD_SOURCE_ROOT, src_rel);
    if (dir[0] && SPECD_BIN_TO_DATADIR[0]) snprintf(cand[nc++], sizeof cand[0], "%s/%s/%s", dir, SPECD_BIN_TO_DATADIR, data_rel);
    snprintf(cand[nc++], sizeof cand[0], "%s/%s", SPECD_DATADIR, data_rel);
    for (int i = 0; i < nc; i++) {
        char real[PATH_MAX];
        if (readable(cand[i], probe) && realpath(cand[i], real)) {
            snprintf(out, len, "%s", real);
            return 0;
        }
    }
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < nc && o + 1 < len; i++) {
        int w = snprintf(out + o, len - o, "%s%s", i ? ", " : "", cand[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    return -1;
}

int cli_default_web_root(char *out, size_t len) { return find_data("web", "web", "/index.html", out, len); }

int cli_data_file(const char *name, char *out, size_t len) {
    char src[128];
    snprintf(src, sizeof src, "cli/data/%s", name);
    return find_data(src, name, "", out, len);
}
