/* cmd.h — the specd subcommands; each is a thin shell over the engine API and
 * returns the process exit status. */
#ifndef SPECD_CMD_H
#define SPECD_CMD_H

int cmd_generate(int argc, char **argv);
int cmd_serve(int argc, char **argv);
#include <stddef.h>
/* The built-in pair installed with specd (a small llama trained on
 * Shakespeare + its distilled draft): their paths, said on stderr with how
 * to use a real model; -1 with err when not installed. */
int cmd_default_pair(const char **target, const char **draft, char *err, size_t errlen);
int cmd_verify(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_convert_eagle3(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_telemetry(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_gguf_split(int argc, char **argv);
int cmd_train_medusa(int argc, char **argv);
int cmd_train_eagle(int argc, char **argv);
int cmd_distill_draft(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_train_tokenizer(int argc, char **argv);
#include <stdio.h>
/* Prints "    -hf REF" for up to max cached models to f (NULL: count only); returns how many there are. */
int cmd_models_hint(FILE *f, int max);

#endif
