/* commands.h: the subcommands of the flashcl program; each takes its own argv (argv[0] is the command name). */
#ifndef FLASHCL_TOOLS_COMMANDS_H
#define FLASHCL_TOOLS_COMMANDS_H

/* Exit statuses shared by every command. */
#define FLASHCL_EXIT_OK 0
#define FLASHCL_EXIT_FAILURE 1 /* bad input file, library or OpenCL error, failed --check */
#define FLASHCL_EXIT_USAGE 2   /* bad command line */

int flashcl_cmd_devices(int argc, char **argv);
int flashcl_cmd_run(int argc, char **argv);
int flashcl_cmd_bench(int argc, char **argv);
int flashcl_cmd_tune(int argc, char **argv);

#endif
