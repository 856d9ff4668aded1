/* config_internal.h — what the config files share (not a public header:
 * policy/config.h is the contract): the reference-counted snapshot, the
 * schema types and tables (config.c), the defaults. Files: config.c (snapshot,
 * schema, defaults, rule lookup, key listing, restart diff), config_load.c
 * (YAML parsing, validation, environment, loading), store.c (the store). */
#ifndef SPECD_POLICY_CONFIG_INTERNAL_H
#define SPECD_POLICY_CONFIG_INTERNAL_H

#include "policy/config.h"

#include <stdatomic.h>
#include <stddef.h>

typedef struct {
    atomic_int refs;
    pol_config cfg;
} pol_snap;

static inline pol_snap *snap_of(const pol_config *c) { return (pol_snap *)((char *)c - offsetof(pol_snap, cfg)); }

static inline void cfg_ref(const pol_config *c) { atomic_fetch_add_explicit(&snap_of(c)->refs, 1, memory_order_relaxed); }

typedef enum { K_INT, K_FLOAT, K_BOOL, K_STR, K_ENUM, K_ORIGINS, K_INTLIST } ktype;

typedef struct {
    const char *name;
    ktype t;
    size_t off, cap;              /* field offset in the section struct; string capacity */
    double lo, hi;                /* range for numbers (each entry of a K_INTLIST) */
    const char *const *enums;     /* NULL-terminated for K_ENUM */
    bool restart;                 /* cannot change live */
} keydef;

#define NKEYS(a) (int)(sizeof(a) / sizeof((a)[0]))

typedef struct {
    const char *name;
    const keydef *keys;
    int n;
    size_t off; /* section offset in pol_config */
} secdef;

#define MAXKEYS 40

/* The sections in file order, and policy.rules[]'s keys (config.c). */
#define POL_N_SECTIONS 7
extern const secdef pol_sections[POL_N_SECTIONS];
extern const keydef pol_rule_keys[];
extern const int pol_n_rule_keys;

/* Every setting at its default. */
void pol_cfg_defaults(pol_config *c);

#endif
