/* main.c — the specd binary: dispatches to a subcommand. */
#include "cli/cmd.h"
#include "cli/util.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cmds[] = {
    {"serve", cmd_serve, "run the server: WebSocket streaming, OpenAI-compatible HTTP, metrics, web pages"},
    {"generate", cmd_generate, "generate text from a prompt, streaming to stdout"},
    {"verify", cmd_verify, "test that speculative decoding samples the target's distribution (chi-square)"},
    {"bench", cmd_bench, "measure prefill/decode speed against the memory-bandwidth roofline"},
    {"mkmodel", cmd_mkmodel, "write a llama GGUF with random weights, or widen / re-quantize one"},
    {"convert-eagle3", cmd_convert_eagle3, "a published EAGLE-3 head (config.json + safetensors) as a GGUF side file"},
    {"tokenize", cmd_tokenize, "print the token ids of stdin"},
    {"detokenize", cmd_detokenize, "print the text of the token ids on stdin"},
    {"telemetry", cmd_telemetry, "read back the SQLite speculation telemetry: summary, recent sessions"},
    {"pull", cmd_pull, "download a GGUF from a Hugging Face repository into the cache (REPO[:QUANT])"},
    {"models", cmd_models, "list the cached models: architecture, size, quant, tokenizer"},
    {"gguf-split", cmd_gguf_split, "merge or split llama.cpp split GGUF files"},
    {"train-medusa", cmd_train_medusa, "train Medusa heads for a target on the CPU into a GGUF side file"},
    {"train-eagle", cmd_train_eagle, "train an EAGLE-3 draft head for a target on the CPU into a GGUF side file"},
    {"train", cmd_train, "train a llama model on text (from scratch or from a GGUF), tokenizer from a GGUF"},
    {"train-tokenizer", cmd_train_tokenizer, "train a byte-level BPE vocabulary on text into a tokenizer GGUF"},
    {"distill-draft", cmd_distill_draft, "train a small draft for a target by distillation on its own outputs"},
    {"eval", cmd_eval, "write the logits of a token sequence to a file (testing)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: specd COMMAND [options]   (specd COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) fprintf(f, "  %-15s %s\n", cmds[i].name, cmds[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    const char *names[sizeof(cmds) / sizeof(cmds[0])];
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) names[i] = cmds[i].name;
    const char *s = cli_suggest_word(argv[1], names, (int)(sizeof(cmds) / sizeof(cmds[0])));
    if (s) fprintf(stderr, "specd: unknown command '%s' (did you mean '%s'?)\n", argv[1], s);
    else fprintf(stderr, "specd: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
