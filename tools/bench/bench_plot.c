/* bench_plot.c: the --plot figure: data and a gnuplot script in a temporary folder, then `gnuplot` run on them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_report.h"
#include "dtype_option.h"

/* The figure's curves: data columns 2.. of the data file. */
enum { COL_SPEEDUP_FWD, COL_SPEEDUP_FB, COL_FLASH_FWD, COL_STD_FWD, COL_FLASH_FB, COL_STD_FB, COLUMN_COUNT };
static const char *const CURVE_TITLES[COLUMN_COUNT] = {"forward",       "forward+backward", "flash forward",
                                                       "standard forward", "flash fwd+bwd", "standard fwd+bwd"};

static double speedup(const bench_record_list *records, int seqlen, bench_direction direction) {
    const bench_record *flash = bench_records_find(records, seqlen, FLASHCL_IMPL_FLASH, direction);
    const bench_record *standard = bench_records_find(records, seqlen, FLASHCL_IMPL_STANDARD, direction);
    return flash && standard && flash->ok && standard->ok ? standard->median_ms / flash->median_ms : NAN;
}

static double extra(const bench_record_list *records, int seqlen, flashcl_impl impl, bench_direction direction) {
    const bench_record *r = bench_records_find(records, seqlen, impl, direction);
    return r && r->ok ? r->extra_device_bytes : NAN;
}

/* One line per N: N and the six columns ("?" where missing). has[c] tells
 * whether column c has any point, so empty curves are left out of the plot
 * (gnuplot refuses a plot with no points at all). */
static int write_data(const char *path, const bench_options *o, const bench_record_list *records,
                      int has[COLUMN_COUNT]) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    memset(has, 0, COLUMN_COUNT * sizeof has[0]);
    for (int i = 0; i < o->seqlen_count; ++i) {
        const int n = o->seqlens[i];
        const double values[COLUMN_COUNT] = {
            speedup(records, n, BENCH_DIR_FORWARD),
            speedup(records, n, BENCH_DIR_FORWARD_BACKWARD),
            extra(records, n, FLASHCL_IMPL_FLASH, BENCH_DIR_FORWARD),
            extra(records, n, FLASHCL_IMPL_STANDARD, BENCH_DIR_FORWARD),
            extra(records, n, FLASHCL_IMPL_FLASH, BENCH_DIR_FORWARD_BACKWARD),
            extra(records, n, FLASHCL_IMPL_STANDARD, BENCH_DIR_FORWARD_BACKWARD),
        };
        fprintf(f, "%d", n);
        for (int c = 0; c < COLUMN_COUNT; ++c) {
            if (isnan(values[c])) {
                fputs(" ?", f);
            } else {
                fprintf(f, " %.17g", values[c]);
                has[c] = 1;
            }
        }
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* A gnuplot single-quoted string: only the quote itself needs doubling. */
static void write_quoted(FILE *f, const char *text) {
    fputc('\'', f);
    for (const char *p = text; *p; ++p) {
        if (*p == '\'') fputc('\'', f);
        fputc(*p, f);
    }
    fputc('\'', f);
}

/* Plots the columns [first, last] that have points, or an empty frame. */
static void write_panel(FILE *f, const char *data_path, const int has[COLUMN_COUNT], int first, int last,
                        int floor_zero) {
    int curves = 0;
    for (int c = first; c <= last; ++c) {
        if (!has[c]) continue;
        fputs(curves++ ? ", \\\n     " : "plot ", f);
        write_quoted(f, data_path);
        /* Zero bytes (flash forward) cannot sit on a log axis: drawn at 1 B. */
        if (floor_zero)
            fprintf(f, " using 1:($%d > 0 ? $%d : 1)", c + 2, c + 2);
        else
            fprintf(f, " using 1:%d", c + 2);
        fprintf(f, " with linespoints lw 2 pt 7 title '%s'", CURVE_TITLES[c]);
    }
    if (!curves) fputs("set label 1 'no data' at graph 0.45, 0.5\nplot [1:2] [1:2] -1 notitle\nunset label 1", f);
    fputc('\n', f);
}

static int write_script(const char *path, const char *data_path, const char *png_path, const bench_options *o,
                        const bench_record_list *records, const int has[COLUMN_COUNT]) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    /* noenhanced: device names may hold '_' or '^', which enhanced text would eat. */
    fputs("set terminal pngcairo size 1400,560 noenhanced font 'sans,11'\nset output ", f);
    write_quoted(f, png_path);
    char title[512];
    snprintf(title, sizeof title, "flashcl bench: d=%d, H=%d, %s, %s -- %s", o->head_dim, bench_heads_for(o),
             o->causal ? "causal" : "not causal", cli_dtype_word(o->dtype), records->device);
    fputs("\nset datafile missing '?'\nset multiplot layout 1,2 title ", f);
    write_quoted(f, title);
    fputs("\nset grid\nset key top left\nset logscale x 2\nset xlabel 'sequence length N'\n"
          "set title 'speedup of flash over standard'\nset ylabel 'standard time / flash time'\n"
          "set yrange [0:*]\n"
          "set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dashtype 2 lc rgb 'gray40'\n", f);
    write_panel(f, data_path, has, COL_SPEEDUP_FWD, COL_SPEEDUP_FB, 0);
    fputs("unset arrow 1\n", f);
    fputs("set title 'extra device memory (beyond inputs and outputs)'\n"
          "set ylabel 'bytes (log scale; 0 drawn at 1)'\nset logscale y 10\nset yrange [0.5:*]\n"
          "set format y '%.0e'\n", f);
    write_panel(f, data_path, has, COL_FLASH_FWD, COL_STD_FB, 1);
    fputs("unset multiplot\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

/* Runs `gnuplot script`; 0 on success, 127 when gnuplot is not found. */
static int run_gnuplot(const char *script) {
    const pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int bench_write_plot(const char *png_path, const bench_options *o, const bench_record_list *records) {
    const char *tmp = getenv("TMPDIR");
    char dir[512], data_path[600], script_path[600];
    snprintf(dir, sizeof dir, "%s/flashcl-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("flashcl bench: creating a temporary folder for the plot");
        return -1;
    }
    snprintf(data_path, sizeof data_path, "%s/data.txt", dir);
    snprintf(script_path, sizeof script_path, "%s/plot.gp", dir);
    int has[COLUMN_COUNT];
    int result = -1;
    if (write_data(data_path, o, records, has) != 0 || write_script(script_path, data_path, png_path, o, records, has))
        fprintf(stderr, "flashcl bench: writing the plot's data in %s failed\n", dir);
    else {
        const int code = run_gnuplot(script_path);
        if (code == 127)
            fprintf(stderr, "flashcl bench: gnuplot not found: install it (Debian: gnuplot-nox) to use --plot\n");
        else if (code != 0)
            fprintf(stderr, "flashcl bench: gnuplot failed (exit status %d) drawing %s\n", code, png_path);
        else
            result = 0;
    }
    remove(data_path);
    remove(script_path);
    rmdir(dir);
    return result;
}
