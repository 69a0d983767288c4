/* cli_util.h: helpers the flashcl subcommands share (option values, numbers, plans, error reports). */
#ifndef FLASHCL_TOOLS_CLI_UTIL_H
#define FLASHCL_TOOLS_CLI_UTIL_H

#include <stddef.h>

#include "flashcl.h"

/* Matches argv[*i] against option `name` ("--device"), in the forms
 * "--device X" and "--device=X". Returns 1 and sets *value (advancing *i
 * past a separate value) on a match, 0 if argv[*i] is another option, -1 if
 * it matches but the value is missing (a message is printed). */
int cli_option_value(int argc, char **argv, int *i, const char *name, const char **value);

/* Whole-string parses; 0 on success, -1 on junk or out of range. */
int cli_parse_int(const char *text, long min, long max, int *out);
int cli_parse_double(const char *text, double *out);

/* "BQ,BK,TQ,TK" into a plan (derived fields zero); 0 or -1. */
int cli_parse_plan(const char *text, flashcl_plan *plan);

/* "block 64x32, threads 8x32 (work-group 256, local memory 40192 B)". */
void cli_format_plan(const flashcl_plan *plan, char *out, size_t out_size);

/* "1.5 GiB", "32 KiB", "512 B". */
void cli_format_bytes(unsigned long long bytes, char *out, size_t out_size);

/* "CPU", "GPU", "accelerator", ... (several joined with '+'). */
void cli_format_device_type(cl_device_type type, char *out, size_t out_size);

/* Prints "flashcl <command>: <what>: <status string>: <last error>" and,
 * for a failed kernel build, the build log, to stderr. ctx may be NULL
 * (then the thread's context-creation error is shown). */
void cli_report_library_error(const char *command, const char *what, const flashcl_context *ctx,
                              flashcl_status status);

/* "pthread-... (Portable Computing Language)" for the device of ctx. */
void cli_describe_device(cl_device_id device, char *out, size_t out_size);

#endif
