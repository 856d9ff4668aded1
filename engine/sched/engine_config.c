/* engine_config.c — the engine settings of a validated config snapshot: the
 * one mapping from config.yaml to engine_config that serve, generate and
 * bench use (see engine.h). */
#include "engine/engine.h"
#include "kernels/backend.h"

#include <string.h>

_Static_assert(ENGINE_BACKEND_AUTO == (int)BACKEND_AUTO && ENGINE_BACKEND_CPU == (int)BACKEND_CPU &&
                   ENGINE_BACKEND_CUDA == (int)BACKEND_CUDA,
               "engine_backend names backend_kind's values");

void engine_config_from_policy(engine_config *ec, const pol_config *pc) {
    const pol_engine *pe = &pc->engine;
    const pol_speculation *ps = &pc->speculation;
    ec->backend = pe->backend == POL_BACKEND_CUDA ? BACKEND_CUDA : pe->backend == POL_BACKEND_CPU ? BACKEND_CPU
                                                                                              : BACKEND_AUTO;
    ec->threads = pe->threads;
    ec->tensor_parallel = pe->tensor_parallel;
    for (int r = 0; r < pe->devices.n && r < ENGINE_MAX_SHARDS; r++) ec->devices[r] = pe->devices.v[r];
    ec->device = pe->devices.n > 0 ? pe->devices.v[0] : 0;
    ec->max_running = pe->max_running;
    ec->max_batch = pe->max_batch;
    ec->max_ctx = pe->max_ctx;
    ec->kv_blocks = pe->kv_blocks;
    ec->block_size = pe->block_size;
    ec->kv_type = pe->kv_type == POL_KV_F16 ? KV_F16 : KV_F32;
    ec->prefill_chunk = pe->prefill_chunk;
    ec->prefix_cache = pe->prefix_cache;
    ec->prefix_cache_blocks = pe->prefix_cache_blocks;
    ec->padding_cap = (float)ps->padding_cap;
    ec->draft_mem_warn_pct = (float)ps->draft_mem_warn_pct;
    ec->mode = ps->mode == POL_SPEC_OFF ? SPEC_MODE_OFF : ps->mode == POL_SPEC_DRAFT ? SPEC_MODE_DRAFT : SPEC_MODE_AUTO;
    int m = spec_method_parse(pol_method_name(ps->method));
    ec->method = m >= 0 ? m : SPEC_METHOD_AUTO;
    ec->coupled = ps->verify == POL_VERIFY_COUPLED;
    ec->ngram_min = ps->ngram_min;
    ec->ngram_max = ps->ngram_max;
    ec->tree = ps->tree == POL_TREE_AUTO ? ENGINE_TREE_AUTO : ps->tree == POL_TREE_FIXED ? ENGINE_TREE_FIXED
                                                                                       : ENGINE_TREE_OFF;
    ec->tree_budget = ps->tree_budget;
    ec->tree_depth = ps->tree_depth > ps->tree_budget ? ps->tree_budget : ps->tree_depth;
    ec->tree_topk = ps->tree_topk;
    ec->learn.enabled = ps->learn;
    ec->learn.ring_bytes = (size_t)ps->learn_ring_mb << 20;
    ec->learn.spill_path = ps->learn_spill[0] ? ps->learn_spill : NULL;
    const pol_grammar *pg = &pc->grammar;
    ec->grammar = (engine_grammar_limits){.max_bytes = (size_t)pg->max_bytes, .max_rules = pg->max_rules,
                                          .max_elements = (size_t)pg->max_elements, .compile_ms = pg->compile_ms,
                                          .matcher_bytes = (size_t)pg->matcher_mb << 20,
                                          .cache_bytes = (size_t)pg->cache_mb << 20};
    ec->gamma = (gamma_params){.gamma_min = ps->gamma_min, .gamma_max = ps->gamma_max,
                               .gamma_default = ps->gamma_default, .adaptive = ps->adaptive, .window = ps->window,
                               .warmup = ps->warmup, .fallback_alpha = (float)ps->fallback_alpha,
                               .fallback_steps = ps->fallback_steps, .probe_interval = ps->probe_interval};
    /* policy rules may ask for a larger γ than the request default bounds */
    for (int i = 0; i < pc->n_rules; i++)
        if (pc->rules[i].gamma_max > ec->gamma.gamma_max && pc->rules[i].gamma_max <= GAMMA_MAX)
            ec->gamma.gamma_max = pc->rules[i].gamma_max;
}
