/* test_config_tp.c — engine.tensor_parallel and engine.devices: defaults, good
 * values, each broken value's exact "file:line:col: message", and the restart
 * diff. */
#include "policy/config.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <string.h>

static const pol_env no_env = {NULL};

static pol_config *load_str(const char *yaml, char *err, size_t n) {
    return pol_config_load_mem(yaml, strlen(yaml), "t.yaml", &no_env, err, n);
}

static const struct {
    const char *yaml, *want;
} broken[] = {
    {"engine:\n  tensor_parallel: 0\n", "t.yaml:2:20: engine.tensor_parallel: 0 is out of range (1..16)"},
    {"engine:\n  tensor_parallel: 17\n", "t.yaml:2:20: engine.tensor_parallel: 17 is out of range (1..16)"},
    {"engine:\n  tensor_parallel: two\n", "t.yaml:2:20: engine.tensor_parallel: expected an integer, got 'two'"},
    {"engine:\n  tensor_parallel: 1.5\n", "t.yaml:2:20: engine.tensor_parallel: expected an integer, got '1.5'"},
    {"engine:\n  tensor_parallel: [2]\n", "t.yaml:2:20: engine.tensor_parallel: expected an integer, got a list"},
    {"engine:\n  devices: 0\n", "t.yaml:2:12: engine.devices: expected a list of integers, got a value"},
    {"engine:\n  devices: []\n", "t.yaml:2:12: engine.devices: the list is empty"},
    {"engine:\n  devices: [0, x]\n", "t.yaml:2:16: engine.devices: expected an integer, got 'x'"},
    {"engine:\n  devices: [0, 1.0]\n", "t.yaml:2:16: engine.devices: expected an integer, got '1.0'"},
    {"engine:\n  devices: [-1]\n", "t.yaml:2:13: engine.devices: -1 is out of range (0..255)"},
    {"engine:\n  devices: [1, 1]\n", "t.yaml:2:16: engine.devices: 1 is listed twice"},
    {"engine:\n  devices: [[0]]\n", "t.yaml:2:13: engine.devices: expected a list of integers, got a list in it"},
    {"engine:\n  devices:\n    - 0\n    - {a: 1}\n",
     "t.yaml:4:7: engine.devices: expected a list of integers, got a mapping in it"},
    {"engine:\n  devices: [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]\n",
     "t.yaml:2:51: engine.devices: too many entries (at most 16)"},
    {"engine:\n  backend: cuda\n  tensor_parallel: 2\n  devices: [0]\n",
     "t.yaml:4:12: engine.devices: 1 device listed for engine.tensor_parallel 2 (backend cuda needs one GPU per shard)"},
    {"engine:\n  backend: cuda\n  tensor_parallel: 4\n",
     "t.yaml:3:20: engine.devices: 1 device listed for engine.tensor_parallel 4"},
    {"engine:\n  backend: cuda\n  devices: [0, 1]\n  tensor_parallel: 3\n",
     "t.yaml:3:12: engine.devices: 2 devices listed for engine.tensor_parallel 3"},
    {"engine:\n  tensor_paralel: 2\n", "t.yaml:2:3: unknown key 'engine.tensor_paralel'; did you mean 'tensor_parallel'?"},
};

int main(void) {
    char err[1024];
    pol_config *d = pol_config_default();
    CHECK(d->engine.tensor_parallel == 1 && d->engine.devices.n == 1 && d->engine.devices.v[0] == 0);

    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        err[0] = 0;
        pol_config *c = load_str(broken[i].yaml, err, sizeof err);
        CHECKF(c == NULL && strstr(err, broken[i].want) == err, "case %zu: want '%s', got '%s'", i, broken[i].want,
               c ? "(loaded)" : err);
        pol_config_free(c);
    }

    /* good values */
    pol_config *c = load_str("engine:\n  backend: cuda\n  tensor_parallel: 2\n  devices: [3, 1, 2]\n", err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (c) {
        CHECK(c->engine.tensor_parallel == 2 && c->engine.devices.n == 3 && c->engine.devices.v[0] == 3 &&
              c->engine.devices.v[1] == 1 && c->engine.devices.v[2] == 2);
        char note[256];
        CHECK(pol_restart_keys(d, c, note, sizeof note) == 3);
        CHECKF(!strcmp(note, "needs restart: engine.backend, engine.tensor_parallel, engine.devices"), "%s", note);
        pol_config_free(c);
    }
    /* the CPU backend does not need one device per shard */
    c = load_str("engine:\n  backend: cpu\n  tensor_parallel: 4\n", err, sizeof err);
    CHECKF(c != NULL && c->engine.tensor_parallel == 4 && c->engine.devices.n == 1, "%s", err);
    pol_config_free(c);
    /* block-style list; the same list again is no restart */
    c = load_str("engine:\n  devices:\n    - 0\n", err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (c) {
        char note[256];
        CHECK(pol_restart_keys(d, c, note, sizeof note) == 0 && note[0] == 0);
        pol_config_free(c);
    }
    c = load_str("engine:\n  devices: [1]\n", err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (c) {
        char note[256];
        CHECK(pol_restart_keys(d, c, note, sizeof note) == 1 && !strcmp(note, "needs restart: engine.devices"));
        pol_config_free(c);
    }
    bool restart = false;
    int found = 0;
    for (int i = 0; pol_config_key(i, &restart); i++)
        if (!strcmp(pol_config_key(i, NULL), "engine.tensor_parallel") || !strcmp(pol_config_key(i, NULL), "engine.devices"))
            found += restart;
    CHECK(found == 2);
    pol_config_free(d);
    TEST_DONE();
}
