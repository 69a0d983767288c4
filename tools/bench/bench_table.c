/* bench_table.c: the human-readable results table `flashcl bench` prints on stdout. */
#include <math.h>
#include <string.h>

#include "bench_report.h"
#include "dtype_option.h"

void bench_format_bytes(double bytes, char *out, size_t out_size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (isnan(bytes)) {
        snprintf(out, out_size, "-");
        return;
    }
    int unit = 0;
    while (bytes >= 1024.0 && unit < 5) {
        bytes /= 1024.0;
        unit++;
    }
    if (unit == 0)
        snprintf(out, out_size, "%.0f B", bytes);
    else
        snprintf(out, out_size, "%.1f %s", bytes, units[unit]);
}

/* A number or "-" where it does not exist. */
static void format_number(double value, const char *format, char *out, size_t out_size) {
    if (isnan(value))
        snprintf(out, out_size, "-");
    else
        snprintf(out, out_size, format, value);
}

/* The impl column: flash rows add their kernel (flashcl_kernel_kind_name's
 * words, "flash/tensor-core"): its time is not the portable kernel's, and a
 * --tensor-cores auto run uses the tensor-core kernel only where the device
 * and the call allow. A hardware matrix-unit kernel adds its backend
 * ("flash/tensor-core/nvidia-wgmma"; forward+backward rows: the backward's),
 * since two of them share that kind on an H100. */
static void row_impl_label(const bench_record *r, char *out, size_t size) {
    if (r->impl != FLASHCL_IMPL_FLASH)
        snprintf(out, size, "%s", bench_impl_name(r->impl));
    else if (r->kernel == FLASHCL_KERNEL_TENSOR_CORE && strcmp(r->backend, "-") != 0)
        snprintf(out, size, "%s/%s/%s", bench_impl_name(r->impl), flashcl_kernel_kind_name(r->kernel), r->backend);
    else
        snprintf(out, size, "%s/%s", bench_impl_name(r->impl), flashcl_kernel_kind_name(r->kernel));
}

static void print_row(FILE *out, const bench_record *r, const bench_record_list *records) {
    char ms[32], tflops[32], speedup[32] = "-", extra[32], traffic[32], bandwidth[32], error[32];
    format_number(r->median_ms, "%.3f", ms, sizeof ms);
    format_number(r->tflops, "%.3f", tflops, sizeof tflops);
    bench_format_bytes(r->extra_device_bytes, extra, sizeof extra);
    bench_format_bytes(r->predicted_hbm_bytes, traffic, sizeof traffic);
    const double gbps = r->ok && r->median_ms > 0 ? r->predicted_hbm_bytes / (r->median_ms * 1e-3) / 1e9 : NAN;
    format_number(gbps, "%.1f", bandwidth, sizeof bandwidth);
    format_number(r->max_abs_err, "%.2e", error, sizeof error);
    if (r->impl == FLASHCL_IMPL_FLASH && r->ok) {
        const bench_record *standard = bench_records_find(records, r->seqlen, FLASHCL_IMPL_STANDARD, r->direction);
        if (standard && standard->ok) snprintf(speedup, sizeof speedup, "%.2fx", standard->median_ms / r->median_ms);
    }
    char impl[48];
    row_impl_label(r, impl, sizeof impl);
    fprintf(out, "%6d %5d  %-34s %10s %8s %8s %10s %12s %8s %10s  %s%s\n", r->seqlen, r->batch,
            impl, ms, tflops, speedup, extra, traffic, bandwidth, error, r->status,
            r->check_failed ? " (check FAILED)" : "");
}

/* --varlen: a row per flash measurement of the direction, the packed batch beside the padded one. */
static void print_varlen_table(FILE *out, const bench_options *o, const bench_record_list *records,
                               bench_direction direction) {
    fprintf(out, "\nvarlen vs padded, %s, flash: the B sequences at random lengths in [%g N, %g N] (seed %llu),\n"
                 "packed end to end (varlen) or all padded to N (padded = the row above)\n",
            direction == BENCH_DIR_FORWARD ? "forward" : "forward+backward", o->varlen_lo, o->varlen_hi,
            o->varlen_seed);
    fprintf(out, "%6s %5s %9s %9s %10s %10s %8s %13s %13s %8s\n", "N", "B", "tokens", "B x N", "padded ms",
            "varlen ms", "speedup", "GFLOP needed", "GFLOP padded", "TFLOP/s");
    for (size_t i = 0; i < records->count; ++i) {
        const bench_record *r = &records->items[i];
        if (r->direction != direction || r->impl != FLASHCL_IMPL_FLASH) continue;
        char tokens[32], padded_ms[32], varlen_ms[32], speedup[32], needed[32], padded[32], tflops[32];
        format_number(r->varlen_tokens, "%.0f", tokens, sizeof tokens);
        format_number(r->ok ? r->median_ms : NAN, "%.3f", padded_ms, sizeof padded_ms);
        format_number(r->varlen_ms, "%.3f", varlen_ms, sizeof varlen_ms);
        format_number(r->varlen_speedup, "%.2fx", speedup, sizeof speedup);
        format_number(r->varlen_flops * 1e-9, "%.3f", needed, sizeof needed);
        format_number(r->padded_flops * 1e-9, "%.3f", padded, sizeof padded);
        format_number(r->varlen_tflops, "%.3f", tflops, sizeof tflops);
        fprintf(out, "%6d %5d %9s %9lld %10s %10s %8s %13s %13s %8s\n", r->seqlen, r->batch, tokens,
                (long long)r->batch * r->seqlen, padded_ms, varlen_ms, speedup, needed, padded, tflops);
    }
}

void bench_print_table(FILE *out, const bench_options *o, const bench_record_list *records) {
    for (int direction = BENCH_DIR_FORWARD; direction <= BENCH_DIR_FORWARD_BACKWARD; ++direction) {
        int rows = 0;
        for (size_t i = 0; i < records->count; ++i) rows += records->items[i].direction == (bench_direction)direction;
        if (!rows) continue;
        fprintf(out, "\n%s: d=%d, H=%d, %s, %s, median of %d runs after %d warm-up; device: %s\n",
                direction == BENCH_DIR_FORWARD ? "forward" : "forward+backward", o->head_dim, bench_heads_for(o),
                o->causal ? "causal" : "not causal", cli_dtype_word(o->dtype), o->repeat, o->warmup,
                records->device);
        if (o->bias)
            fprintf(out, "additive bias: %s, zeros in the storage type\n",
                    o->bias == BENCH_BIAS_FULL ? "(B, H, N, N)" : "(1, 1, N, N)");
        if (o->softcap > 0.0 || o->alibi_max_bias > 0.0)
            fprintf(out, "score modifiers: softcap %g, ALiBi max_bias %g (0: off)\n", o->softcap, o->alibi_max_bias);
        if (o->dropout > 0.0 || o->block_density < 1.0)
            fprintf(out, "dropout %g, block density %g (block size %d; TFLOP/s counts the dense FLOPs)\n",
                    o->dropout, o->block_density, o->block_size);
        fprintf(out, "%6s %5s  %-34s %10s %8s %8s %10s %12s %8s %10s  %s\n", "N", "B", "impl/kernel", "ms", "TFLOP/s",
                "speedup", "extra mem", "pred. bytes", "GB/s", "max|diff|", "status");
        for (size_t i = 0; i < records->count; ++i)
            if (records->items[i].direction == (bench_direction)direction) print_row(out, &records->items[i], records);
        if (o->varlen) print_varlen_table(out, o, records, (bench_direction)direction);
    }
    fprintf(out, "\nspeedup = standard time / flash time; extra mem = device memory beyond the inputs and outputs;\n"
                 "pred. bytes = global-memory traffic of the IO model, GB/s = pred. bytes / time;\n"
                 "max|diff| = max abs difference between flash and standard outputs on the same inputs.\n");
    fprintf(out, "impl/kernel: flash rows name the kernel that ran: portable, tensor-core/BACKEND (matrix units:\n"
                 "nvidia-mma-sync, nvidia-wgmma; forward+backward rows: the backward's, the forward's in the\n"
                 "records' forward_backend), tensor-core-emulated (emulated: slow, for tests).\n");
    if (o->varlen)
        fprintf(out, "varlen: speedup = padded ms / varlen ms; GFLOP needed = the FLOP formula summed over the\n"
                     "real lengths, TFLOP/s = GFLOP needed / varlen ms; the packed calls get host copies of the\n"
                     "offsets (no blocking read-back); packed results are not compared (tests cover them).\n");
}
