/* commands.h: the `redlm` subcommands, one file each (worker/cmd_*.c).
 * Each takes the arguments after its name and returns the exit status. */
#ifndef RL_COMMANDS_H
#define RL_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_submit(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_launch(int argc, char **argv);

#endif
