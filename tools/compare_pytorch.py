#!/usr/bin/env python3
"""compare_pytorch.py: flashcl bench and PyTorch scaled_dot_product_attention on the same shapes, one table.

Runs `flashcl bench --json` for the given sweep, then times
torch.nn.functional.scaled_dot_product_attention with each SDPA backend
(math = standard attention, efficient, flash, cudnn) on the same shapes,
dtype and causal flag, and prints TFLOP/s side by side with flashcl's ratio to
each. Meant for the GPU machine (needs CUDA PyTorch); flashcl runs through
OpenCL on the same GPU.

Example (on the GPU machine, from the project root):
  python3 tools/compare_pytorch.py --flashcl build/tools/flashcl --seqlens 1024,4096 --head-dim 64
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flashcl", default="build/tools/flashcl", help="path of the flashcl program")
    p.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--causal", action="store_true")
    p.add_argument("--backward", action="store_true", help="time forward+backward (FLOPs = 3.5 x forward)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--device", default=None, help="flashcl --device SPEC")
    p.add_argument("--backends", default="math,efficient,flash,cudnn")
    p.add_argument("--f32-precision", default="full", choices=["full", "3xtf32"],
                   help="flashcl bench --f32-precision (f32 on the tensor cores in 3xTF32)")
    args = p.parse_args()

    records = run_flashcl(args)
    import torch
    backends = args.backends.split(",")
    print(f"# {torch.cuda.get_device_name()} | dtype {args.dtype} | d={args.head_dim} | causal={int(args.causal)} | "
          f"{'fwd+bwd' if args.backward else 'fwd'} | TFLOP/s (ratio flashcl / backend)")
    print("| N | flashcl | " + " | ".join(backends) + " |")
    print("|---|---|" + "---|" * len(backends))
    for r in records:
        if r.get("impl") != "flash" or r.get("median_ms") in (None, 0):
            continue
        n, b, h, d = r["seqlen"], r["batch"], r["heads"], r["head_dim"]
        flops = 4.0 * b * h * n * n * d * (0.5 if args.causal else 1.0) * (3.5 if args.backward else 1.0)
        ours = flops / (r["median_ms"] * 1e-3) / 1e12
        cells = []
        for backend in backends:
            ms, err = time_torch(torch, backend, b, h, n, d, args.causal, args.dtype, args.backward, args.repeat)
            if ms is None:
                cells.append("n/a")
            else:
                theirs = flops / (ms * 1e-3) / 1e12
                cells.append(f"{theirs:.1f} ({ours / theirs:.2f}x)")
        print(f"| {n} | {ours:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
