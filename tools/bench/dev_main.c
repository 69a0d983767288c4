/* dev_main.c: a stand-alone `flashcl-bench-dev` program for developing the bench outside the flashcl binary. */
#include "bench.h"

int main(int argc, char **argv) { return flashcl_bench_main(argc, argv); }
