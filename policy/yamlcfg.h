/* yamlcfg.h — reads a YAML file (libyaml) into a document and looks up scalar
 * values by dotted path ("models.target"). The first building block of the
 * policy snapshot; errors name the file, line and column. */
#ifndef SPECD_POL_YAMLCFG_H
#define SPECD_POL_YAMLCFG_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pol_yaml pol_yaml;

/* Loads PATH. Returns NULL with "PATH:LINE:COL: reason" in err on a syntax
 * error or when the top level is not a mapping. Caller owns the result. */
pol_yaml *pol_yaml_load(const char *path, char *err, size_t errlen);
void pol_yaml_free(pol_yaml *y); /* accepts NULL */

/* The scalar at a dotted path, or NULL when absent. If present but not a
 * scalar, returns NULL and fills err with the path and position. The string is
 * owned by y. */
const char *pol_yaml_scalar(const pol_yaml *y, const char *path, char *err, size_t errlen);

#endif
