/* config_find.c — where the config file is: -c, then $SPECD_CONFIG, then the
 * working directory, then the system location (see config.h). */
#include "policy/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* set by meson from its prefix and sysconfdir (/usr/local/etc for the default
 * prefix, /etc for prefix /usr) */
#ifndef SPECD_SYSCONFDIR
#define SPECD_SYSCONFDIR "/etc"
#endif

const char *pol_config_system_path(void) { return SPECD_SYSCONFDIR "/specd/config.yaml"; }

const char *pol_config_find(const char *flag, const char **source) {
    const char *env = getenv("SPECD_CONFIG");
    if (flag) return *source = "-c", flag;
    if (env && env[0]) return *source = "$SPECD_CONFIG", env;
    if (access("config.yaml", R_OK) == 0) return *source = "the working directory", "config.yaml";
    if (access(pol_config_system_path(), R_OK) == 0) return *source = "the system location", pol_config_system_path();
    *source = "";
    return NULL;
}
