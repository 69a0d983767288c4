/* bench.h: the entry point of `flashcl bench`, which times flash against standard attention over a sweep. */
#ifndef FLASHCL_TOOLS_BENCH_H
#define FLASHCL_TOOLS_BENCH_H

/* argv[0] is the command name ("bench"). Returns the process exit status:
 * 0 every requested measurement ran and the flash/standard check passed,
 * 1 a measurement failed or the check did not pass, 2 a bad command line. */
int flashcl_bench_main(int argc, char **argv);

#endif
