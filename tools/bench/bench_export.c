/* bench_export.c: the records as a JSON list and as CSV, with the same columns; null / empty where no number exists. */
#include <math.h>
#include <string.h>

#include "bench_report.h"
#include "dtype_option.h"

/* JSON strings escape the quote, the backslash and control characters. */
static void write_json_string(FILE *f, const char *text) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)text; *p; ++p) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* CSV fields are quoted and double their quotes. */
static void write_csv_string(FILE *f, const char *text) {
    fputc('"', f);
    for (const char *p = text; *p; ++p) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

/* Byte counts stay exact integers; measured values keep 6 significant digits. */
static void write_number(FILE *f, double value, const char *missing) {
    if (isnan(value) || isinf(value))
        fputs(missing, f);
    else if (value == floor(value) && fabs(value) < 9007199254740992.0)
        fprintf(f, "%.0f", value);
    else
        fprintf(f, "%.6g", value);
}

static FILE *open_output(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) perror(path);
    return f;
}

static int close_output(FILE *f, const char *path) {
    const int failed = ferror(f);
    if (fclose(f) != 0 || failed) {
        fprintf(stderr, "flashcl bench: writing %s failed\n", path);
        return -1;
    }
    return 0;
}

/* The --varlen fields, after every older one (CSV columns keep their places).
 * kernel came later still (flashcl_kernel_kind_name's word), then the score
 * modifiers' fields, then backend and forward_backend: each appended to the
 * CSV, while the JSON, read by name, has kernel and the backends before
 * status. */
enum { VARLEN_FIELDS = 6 };
static const char *const VARLEN_NAMES[VARLEN_FIELDS] = {"varlen_ms",    "varlen_tflops", "varlen_speedup",
                                                        "varlen_flops", "padded_flops",  "varlen_tokens"};

static void varlen_values(const bench_record *r, double values[VARLEN_FIELDS]) {
    values[0] = r->varlen_ms;
    values[1] = r->varlen_tflops;
    values[2] = r->varlen_speedup;
    values[3] = r->varlen_flops;
    values[4] = r->padded_flops;
    values[5] = r->varlen_tokens;
}

int bench_write_json(const char *path, const bench_record_list *records) {
    FILE *f = open_output(path);
    if (!f) return -1;
    fputs("[\n", f);
    for (size_t i = 0; i < records->count; ++i) {
        const bench_record *r = &records->items[i];
        fputs("  {\"impl\": ", f);
        write_json_string(f, bench_impl_name(r->impl));
        fputs(", \"direction\": ", f);
        write_json_string(f, bench_direction_name(r->direction));
        fprintf(f, ", \"batch\": %d, \"heads\": %d, \"seqlen\": %d, \"head_dim\": %d, \"causal\": %s, \"dtype\": ",
                r->batch, r->heads, r->seqlen, r->head_dim, r->causal ? "true" : "false");
        write_json_string(f, cli_dtype_word(r->dtype));
        const char *names[] = {"median_ms", "tflops",      "extra_device_bytes", "predicted_hbm_bytes",
                               "max_abs_err", "dropout", "block_density"};
        const double values[] = {r->median_ms,   r->tflops,  r->extra_device_bytes, r->predicted_hbm_bytes,
                                 r->max_abs_err, r->dropout, r->block_density};
        for (int k = 0; k < 7; ++k) {
            fprintf(f, ", \"%s\": ", names[k]);
            write_number(f, values[k], "null");
        }
        fprintf(f, ", \"kernel\": ");
        write_json_string(f, flashcl_kernel_kind_name(r->kernel));
        fputs(", \"backend\": ", f);
        write_json_string(f, r->backend);
        fputs(", \"forward_backend\": ", f);
        write_json_string(f, r->forward_backend);
        fputs(", \"softcap\": ", f);
        write_number(f, r->softcap, "null");
        fputs(", \"alibi_max_bias\": ", f);
        write_number(f, r->alibi_max_bias, "null");
        fputs(", \"bias_bytes\": ", f);
        write_number(f, r->bias_bytes, "null");
        fputs(", \"status\": ", f);
        write_json_string(f, r->status);
        fputs(", \"device\": ", f);
        write_json_string(f, records->device);
        double varlen[VARLEN_FIELDS];
        varlen_values(r, varlen);
        for (int k = 0; k < VARLEN_FIELDS; ++k) {
            fprintf(f, ", \"%s\": ", VARLEN_NAMES[k]);
            write_number(f, varlen[k], "null");
        }
        fprintf(f, "}%s\n", i + 1 < records->count ? "," : "");
    }
    fputs("]\n", f);
    return close_output(f, path);
}

int bench_write_csv(const char *path, const bench_record_list *records) {
    FILE *f = open_output(path);
    if (!f) return -1;
    fputs("impl,direction,batch,heads,seqlen,head_dim,causal,dtype,median_ms,tflops,extra_device_bytes,"
          "predicted_hbm_bytes,max_abs_err,dropout,block_density,status,device", f);
    for (int k = 0; k < VARLEN_FIELDS; ++k) fprintf(f, ",%s", VARLEN_NAMES[k]);
    fputs(",kernel,softcap,alibi_max_bias,bias_bytes,backend,forward_backend\n", f);
    for (size_t i = 0; i < records->count; ++i) {
        const bench_record *r = &records->items[i];
        fprintf(f, "%s,%s,%d,%d,%d,%d,%s,%s", bench_impl_name(r->impl), bench_direction_name(r->direction), r->batch,
                r->heads, r->seqlen, r->head_dim, r->causal ? "true" : "false", cli_dtype_word(r->dtype));
        const double values[] = {r->median_ms,   r->tflops,  r->extra_device_bytes, r->predicted_hbm_bytes,
                                 r->max_abs_err, r->dropout, r->block_density};
        for (int k = 0; k < 7; ++k) {
            fputc(',', f);
            write_number(f, values[k], "");
        }
        fputc(',', f);
        write_csv_string(f, r->status);
        fputc(',', f);
        write_csv_string(f, records->device);
        double varlen[VARLEN_FIELDS];
        varlen_values(r, varlen);
        for (int k = 0; k < VARLEN_FIELDS; ++k) {
            fputc(',', f);
            write_number(f, varlen[k], "");
        }
        fprintf(f, ",%s,", flashcl_kernel_kind_name(r->kernel));
        write_number(f, r->softcap, "");
        fputc(',', f);
        write_number(f, r->alibi_max_bias, "");
        fputc(',', f);
        write_number(f, r->bias_bytes, "");
        fputc(',', f);
        write_csv_string(f, r->backend);
        fputc(',', f);
        write_csv_string(f, r->forward_backend);
        fputc('\n', f);
    }
    return close_output(f, path);
}
