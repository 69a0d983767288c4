/* bench_report.h: the bench's outputs: the table on stdout, the JSON and CSV files, and the gnuplot figure. */
#ifndef FLASHCL_TOOLS_BENCH_REPORT_H
#define FLASHCL_TOOLS_BENCH_REPORT_H

#include <stdio.h>

#include "bench_options.h"
#include "bench_record.h"

/* One table per direction: a row per (N, impl). */
void bench_print_table(FILE *out, const bench_options *options, const bench_record_list *records);

/* Return 0, or -1 with the reason on stderr. */
int bench_write_json(const char *path, const bench_record_list *records);
int bench_write_csv(const char *path, const bench_record_list *records);

/* Draws speedup and extra memory versus N with gnuplot. Returns 0, or -1
 * (gnuplot missing or failing) with the reason on stderr. */
int bench_write_plot(const char *path, const bench_options *options, const bench_record_list *records);

/* "1.5 GiB", "32.0 KiB", "512 B". */
void bench_format_bytes(double bytes, char *out, size_t out_size);

#endif
