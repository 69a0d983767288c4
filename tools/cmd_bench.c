/* cmd_bench.c: `flashcl bench`, implemented in tools/bench/. */
#include "bench.h"
#include "commands.h"

int flashcl_cmd_bench(int argc, char **argv) { return flashcl_bench_main(argc, argv); }
