/* run_program.h: runs the bench as a child process with its output captured in files, for the tests. */
#ifndef FLASHCL_TESTS_RUN_PROGRAM_H
#define FLASHCL_TESTS_RUN_PROGRAM_H

/* Runs command[0] (an absolute path) with the arguments command[1..] and
 * then args (both NULL-terminated), stdout and stderr going to
 * <output_prefix>.out and .err. path_override, if not NULL, replaces PATH
 * in the child. Returns the exit status, or -1 if it did not exit normally. */
int run_program(char *const *command, char *const *args, const char *output_prefix, const char *path_override);

/* The whole file as a malloc'ed string ("" if it cannot be read). */
char *read_text_file(const char *path);

#endif
