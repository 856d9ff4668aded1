/* cmd.h — the specd subcommands; each is a thin shell over the engine API and
 * returns the process exit status. */
#ifndef SPECD_CMD_H
#define SPECD_CMD_H

int cmd_generate(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);

#endif
