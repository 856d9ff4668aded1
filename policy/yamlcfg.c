/* yamlcfg.c — YAML document loading and dotted-path lookup (see yamlcfg.h). */
#include "policy/yamlcfg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct pol_yaml {
    yaml_document_t doc;
    char path[512];
};

pol_yaml *pol_yaml_load(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open", path);
        return NULL;
    }
    pol_yaml *y = calloc(1, sizeof(*y));
    yaml_parser_t p;
    if (!y || !yaml_parser_initialize(&p)) {
        fclose(f);
        free(y);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    snprintf(y->path, sizeof(y->path), "%s", path);
    yaml_parser_set_input_file(&p, f);
    int ok = yaml_parser_load(&p, &y->doc);
    if (!ok) {
        snprintf(err, errlen, "%s:%zu:%zu: %s%s%s", path, p.problem_mark.line + 1, p.problem_mark.column + 1,
                 p.problem ? p.problem : "YAML error", p.context ? " " : "", p.context ? p.context : "");
    }
    yaml_parser_delete(&p);
    fclose(f);
    if (!ok) {
        free(y);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&y->doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%zu:%zu: the top level must be a mapping of sections", path,
                 root->start_mark.line + 1, root->start_mark.column + 1);
        pol_yaml_free(y);
        return NULL;
    }
    return y;
}

void pol_yaml_free(pol_yaml *y) {
    if (!y) return;
    yaml_document_delete(&y->doc);
    free(y);
}

const char *pol_yaml_scalar(const pol_yaml *y, const char *path, char *err, size_t errlen) {
    yaml_document_t *doc = (yaml_document_t *)&y->doc;
    yaml_node_t *node = yaml_document_get_root_node(doc);
    const char *seg = path;
    while (node && *seg) {
        size_t len = strcspn(seg, ".");
        if (node->type != YAML_MAPPING_NODE) {
            snprintf(err, errlen, "%s:%zu:%zu: '%.*s' is not a mapping", y->path, node->start_mark.line + 1,
                     node->start_mark.column + 1, (int)(seg - path - 1), path);
            return NULL;
        }
        yaml_node_t *next = NULL;
        for (yaml_node_pair_t *pr = node->data.mapping.pairs.start; pr < node->data.mapping.pairs.top; pr++) {
            yaml_node_t *k = yaml_document_get_node(doc, pr->key);
            if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == len &&
                !memcmp(k->data.scalar.value, seg, len)) {
                next = yaml_document_get_node(doc, pr->value);
                break;
            }
        }
        node = next;
        seg += len;
        if (*seg == '.') seg++;
    }
    if (!node) return NULL;
    if (node->type != YAML_SCALAR_NODE) {
        snprintf(err, errlen, "%s:%zu:%zu: '%s' must be a single value", y->path, node->start_mark.line + 1,
                 node->start_mark.column + 1, path);
        return NULL;
    }
    return (const char *)node->data.scalar.value;
}
