#!/usr/bin/env python3
"""compare_pytorch.py: flashcl bench and PyTorch scaled_dot_product_attention on the same shapes, one table.

Runs `flashcl bench --json` for the given sweep, then times
torch.nn.functional.scaled_dot_product_attention with each SDPA backend
(math = standard attention, efficient, flash, cudnn) on the same shapes,
dtype and causal flag, and prints TFLOP/s side by side with flashcl's ratio to
each. Meant for the GPU machine (needs CUDA PyTorch); flashcl runs through
OpenCL on the same GPU.

With --backward the bench writes two records per size, the forward alone and
forward+backward; each gets its own table, its own FLOP count (the bench's:
4*B*H*N*N*d, halved when causal, times 3.5 for forward+backward) and PyTorch
timed on the same passes.

With --decode it runs `flashcl bench --decode` instead (Sq query rows against KV caches of the
--cache-lens, GQA through --heads/--heads-kv) and times SDPA (enable_gqa=True) on the same
shapes; the table is in GB/s of K and V read once, PyTorch timed with CUDA events, flashcl
with wall time around clFinish (both medians), beside flashcl's copy rate of the same run.
With --query-len above 1 the rows are causal and bottom-right aligned (the last positions of
the cache), which SDPA takes only as an explicit mask: its flash backend refuses masks (n/a).

Example (on the GPU machine, from the project root):
  python3 tools/compare_pytorch.py --flashcl build/tools/flashcl --seqlens 1024,4096 --head-dim 64
  python3 tools/compare_pytorch.py --decode --cache-lens 4096,32768,131072 --dtype f16 --head-dim 128
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run_flashcl(args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [args.flashcl, "bench", "--seqlens", args.seqlens, "--head-dim", str(args.head_dim),
               "--dtype", args.dtype, "--repeat", str(args.repeat), "--impl", "flash", "--json", out]
        if args.causal:
            cmd.append("--causal")
        if args.backward:
            cmd.append("--backward")
        if args.device:
            cmd += ["--device", args.device]
        if args.f32_precision != "full":
            cmd += ["--f32-precision", args.f32_precision]
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        with open(out) as f:
            return json.load(f)


FWD_BWD = "fwd+bwd"  # the bench's name of the forward+backward direction ("fwd" is the forward alone)


def row_is_backward(record):
    """Whether a bench record timed forward+backward (else the forward alone)."""
    return record.get("direction") == FWD_BWD


def row_flops(record):
    """The FLOPs of what a bench record timed, as the bench counts them (bench_flops in
    tools/bench/bench_run.c): 4*B*H*N*N*d for the forward, halved when causal, and 3.5 times
    that for forward+backward (the backward counts 2.5 forwards)."""
    n = record["seqlen"]
    flops = 4.0 * record["batch"] * record["heads"] * n * n * record["head_dim"]
    if record.get("causal"):
        flops *= 0.5
    return flops * (3.5 if row_is_backward(record) else 1.0)


def tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12


def flash_rows(records, backward):
    """The flash records of one direction that have a time."""
    return [r for r in records if r.get("impl") == "flash" and r.get("median_ms") not in (None, 0)
            and row_is_backward(r) == backward]


def median_cuda_ms(torch, step, repeat):
    """(median ms of `repeat` calls of step timed with CUDA events after 3 warm-ups, None), or (None, the
    reason) when the backend refuses the shape or runs out of memory."""
    try:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # backend unavailable for this dtype/shape, or OOM
        return None, str(e).splitlines()[0][:60]
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2], None


def time_torch(torch, backend, batch, heads, seqlen, head_dim, causal, dtype, backward, repeat):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    tdtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    shape = (batch, heads, seqlen, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=tdtype, requires_grad=backward) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=tdtype)

    def step():
        with sdpa_kernel(backends[backend]):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if backward:
                o.backward(dout)

    return median_cuda_ms(torch, step, repeat)


def run_flashcl_decode(args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "decode.json")
        cmd = [args.flashcl, "bench", "--decode", "--cache-lens", args.cache_lens, "--batch", str(args.batch),
               "--heads", str(args.heads), "--heads-kv", str(args.heads_kv), "--head-dim", str(args.head_dim),
               "--query-len", str(args.query_len), "--dtype", args.dtype, "--repeat", str(args.repeat),
               "--json", out]
        if args.device:
            cmd += ["--device", args.device]
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        with open(out) as f:
            return json.load(f)


def time_torch_decode(torch, backend, r, dtype, repeat):
    """SDPA on one decode record's shapes: q (B, Hq, Sq, d) against k, v (B, Hkv, N, d), GQA, causal for
    Sq > 1 (bottom-right: the query rows are the last positions, as flashcl's decode counts them)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    tdtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    b, hq, hkv, sq, n, d = r["batch"], r["heads_q"], r["heads_kv"], r["query_len"], r["cache_len"], r["head_dim"]
    q = torch.randn((b, hq, sq, d), device="cuda", dtype=tdtype)
    k, v = (torch.randn((b, hkv, n, d), device="cuda", dtype=tdtype) for _ in range(2))
    mask = None
    if sq > 1:  # bottom-right causal: row i sees keys j <= i + n - sq
        i = torch.arange(sq, device="cuda")[:, None]
        j = torch.arange(n, device="cuda")[None, :]
        mask = j <= i + (n - sq)

    def step():
        with sdpa_kernel(backends[backend]):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hq != hkv)

    return median_cuda_ms(torch, step, repeat)


def print_decode_table(torch, args, backends, records):
    r0 = records[0]
    print(f"# {torch.cuda.get_device_name()} | decode | {args.dtype} | d={args.head_dim} | B={args.batch} | "
          f"Hq={args.heads} Hkv={args.heads_kv} | Sq={args.query_len} | GB/s of K+V read once "
          f"(flashcl copy rate {r0['copy_gbps']:.0f} GB/s); PyTorch: CUDA events, flashcl: wall time around clFinish"
          + (" of 10 calls enqueued back to back" if r0.get("timing") == "back_to_back" else " of each call"))
    print("| N | flashcl | " + " | ".join(backends) + " |")
    print("|---|---|" + "---|" * len(backends))
    for r in records:
        kv_bytes = 2.0 * r["batch"] * r["cache_len"] * r["heads_kv"] * r["head_dim"] * (4 if args.dtype == "f32" else 2)
        cells = []
        for backend in backends:
            ms, err = time_torch_decode(torch, backend, r, args.dtype, args.repeat)
            cells.append("n/a" if ms is None else f"{kv_bytes / (ms * 1e-3) / 1e9:.0f} ({ms:.3f} ms)")
        print(f"| {r['cache_len']} | {r['kv_gbps']:.0f} ({r['ms']:.3f} ms, {r['kernel']}) | " + " | ".join(cells) + " |")
    print()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flashcl", default="build/tools/flashcl", help="path of the flashcl program")
    p.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--causal", action="store_true")
    p.add_argument("--backward", action="store_true",
                   help="also time forward+backward (a second table; FLOPs = 3.5 x forward)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--device", default=None, help="flashcl --device SPEC")
    p.add_argument("--backends", default="math,efficient,flash,cudnn")
    p.add_argument("--f32-precision", default="full", choices=["full", "3xtf32"],
                   help="flashcl bench --f32-precision (f32 on the tensor cores in 3xTF32)")
    p.add_argument("--decode", action="store_true", help="the decode comparison (flashcl bench --decode)")
    p.add_argument("--cache-lens", default="4096,32768,131072", help="--decode: cache lengths N")
    p.add_argument("--batch", type=int, default=1, help="--decode: sequences")
    p.add_argument("--heads", type=int, default=32, help="--decode: query heads")
    p.add_argument("--heads-kv", type=int, default=8, help="--decode: K/V heads")
    p.add_argument("--query-len", type=int, default=1, help="--decode: query rows per sequence")
    p.add_argument("--back-to-back", action="store_true",
                   help="--decode: time flashcl's calls 10 at a time, enqueued back to back (as a decode loop runs)")
    args = p.parse_args()

    if args.decode:
        if args.head_dim == 64 and "--head-dim" not in sys.argv:
            args.head_dim = 128  # the decode bench's default
        records = run_flashcl_decode(args)
        import torch
        print_decode_table(torch, args, args.backends.split(","), records)
        return

    records = run_flashcl(args)
    import torch
    backends = args.backends.split(",")
    for backward in ([False, True] if args.backward else [False]):
        print_table(torch, args, backends, flash_rows(records, backward), backward)


def print_table(torch, args, backends, rows, backward):
    """One direction: flashcl's records of it beside PyTorch timed on the same passes."""
    print(f"# {torch.cuda.get_device_name()} | dtype {args.dtype} | d={args.head_dim} | causal={int(args.causal)} | "
          f"{'fwd+bwd' if backward else 'fwd'} | TFLOP/s (ratio flashcl / backend)")
    print("| N | flashcl | " + " | ".join(backends) + " |")
    print("|---|---|" + "---|" * len(backends))
    for r in rows:
        n, b, h, d = r["seqlen"], r["batch"], r["heads"], r["head_dim"]
        flops = row_flops(r)
        ours = tflops(flops, r["median_ms"])
        # The bench's own figure must be the same: a difference means the FLOPs above are not what it timed.
        if r.get("tflops") and abs(ours - r["tflops"]) > 0.01 * r["tflops"]:
            print(f"warning: N={n}: {ours:.1f} TFLOP/s here, {r['tflops']:.1f} in the bench record", file=sys.stderr)
        cells = []
        for backend in backends:
            ms, err = time_torch(torch, backend, b, h, n, d, args.causal, args.dtype, backward, args.repeat)
            if ms is None:
                cells.append("n/a")
            else:
                theirs = tflops(flops, ms)
                cells.append(f"{theirs:.1f} ({ours / theirs:.2f}x)")
        print(f"| {n} | {ours:.1f} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
