/* bench_decode.h: `flashcl bench --decode`: few query rows against KV caches, in GB/s of K and V beside the
 * device's own copy rate measured in the same run. */
#ifndef FLASHCL_TOOLS_BENCH_DECODE_H
#define FLASHCL_TOOLS_BENCH_DECODE_H

/* 1 if argv (argv[0] the command name) asks for the decode bench. */
int bench_decode_requested(int argc, char **argv);

/* The decode bench; its exit status (0, 1 a measurement failed, 2 bad options). */
int bench_decode_main(int argc, char **argv);

#endif
