"""The coalescing bench on a GPU: experts in pinned host memory, streamed over PCIe, applied on the GPU.

The optional GPU cell of ``moeroof bench`` (the replay bench and grouped compute on an H200). A synthetic MoE stack of
E experts × L layers, each expert two fp16 matrices (d×f and f×d), lives in pinned host memory.
A decode step of B tokens routes each token to K experts per layer (Zipf popularity, seeded);

- ``uncoalesced``: for every token and each of its K experts, copy the expert to the GPU and
  apply it to that token alone (B·K copies per layer);
- ``coalesced``: copy each expert of the layer's union once and apply it to all tokens routed
  to it in one grouped matmul (U(B) copies per layer).

Timed with CUDA events after warm-up steps; reports step seconds, bytes copied, the union and
net tok/s per B. Run on the device machine (PyTorch with CUDA); not part of CI:

    python3 benchmarks/gpu_moe_bench.py --out "$OUT/gpu_moe_bench.json"
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time


def main(argv=None) -> int:
    import numpy as np
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--d-ff", type=int, default=1408)
    ap.add_argument("--zipf-s", type=float, default=0.8)
    ap.add_argument("--batch", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    e, k, layers, d, f = args.experts, args.top_k, args.layers, args.d_model, args.d_ff
    gen = torch.Generator().manual_seed(args.seed)
    w_in = [
        torch.randn(e, d, f, generator=gen, dtype=torch.float32).to(torch.float16).pin_memory() for _ in range(layers)
    ]
    w_out = [
        torch.randn(e, f, d, generator=gen, dtype=torch.float32).to(torch.float16).pin_memory() for _ in range(layers)
    ]
    expert_bytes = 2 * d * f * 2
    buf_in = torch.empty(e, d, f, device=dev, dtype=torch.float16)
    buf_out = torch.empty(e, f, d, device=dev, dtype=torch.float16)
    rng = np.random.default_rng(args.seed)
    ranks = np.arange(1, e + 1, dtype=float)
    popularity = ranks**-args.zipf_s
    popularity /= popularity.sum()

    def route(b):
        # Gumbel-top-K over log popularity, one random rank permutation per layer
        perms = [rng.permutation(e) for _ in range(layers)]
        out = np.empty((layers, b, k), dtype=np.int64)
        for layer in range(layers):
            scores = np.log(popularity[perms[layer]])[None, :] + rng.gumbel(size=(b, e))
            out[layer] = np.argsort(-scores, axis=1)[:, :k]
        return out

    def step(x, routes, coalesced):
        copies = 0
        for layer in range(layers):
            r = routes[layer]
            y = torch.zeros_like(x)
            if coalesced:
                for ex in np.unique(r):
                    buf_in[ex].copy_(w_in[layer][ex], non_blocking=True)
                    buf_out[ex].copy_(w_out[layer][ex], non_blocking=True)
                    copies += 1
                    tok = torch.as_tensor(np.nonzero((r == ex).any(axis=1))[0], device=dev)
                    y.index_add_(0, tok, torch.relu(x[tok] @ buf_in[ex]) @ buf_out[ex])
            else:
                for t in range(r.shape[0]):
                    for ex in r[t]:
                        buf_in[ex].copy_(w_in[layer][ex], non_blocking=True)
                        buf_out[ex].copy_(w_out[layer][ex], non_blocking=True)
                        copies += 1
                        y[t : t + 1] += torch.relu(x[t : t + 1] @ buf_in[ex]) @ buf_out[ex]
            x = x + y
        return x, copies

    rows = []
    for b in [int(v) for v in args.batch.split(",")]:
        for mode in ("uncoalesced", "coalesced"):
            times, copies_list, unions = [], [], []
            for i in range(args.steps + 1):
                routes = route(b)
                x = torch.randn(b, d, device=dev, dtype=torch.float16) * 0.01
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _, copies = step(x, routes, mode == "coalesced")
                end.record()
                end.synchronize()
                if i == 0:
                    continue  # warm-up
                times.append(start.elapsed_time(end) / 1e3)
                copies_list.append(copies)
                unions.append(float(np.mean([np.unique(routes[layer]).size for layer in range(layers)])))
            t = statistics.median(times)
            rows.append(
                {
                    "batch": b,
                    "mode": mode,
                    "step_seconds": t,
                    "net_tok_s": b / t,
                    "bytes_per_step": float(np.mean(copies_list)) * expert_bytes,
                    "union_per_layer": float(np.mean(unions)),
                    "steps_timed": len(times),
                }
            )
            print(
                f"B={b:4d} {mode:12s} step {t * 1e3:9.2f} ms  {b / t:9.1f} tok/s  "
                f"{rows[-1]['bytes_per_step'] / 1e9:7.2f} GB/step  U={rows[-1]['union_per_layer']:.1f}",
                flush=True,
            )
    result = {
        "what": "coalescing bench on a GPU, experts streamed from pinned host memory (benchmarks/gpu_moe_bench.py)",
        "provenance": "witnessed",
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python3 benchmarks/gpu_moe_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": {
            "experts": e,
            "top_k": k,
            "layers": layers,
            "d_model": d,
            "d_ff": f,
            "dtype": "float16",
            "expert_bytes": expert_bytes,
            "zipf_s": args.zipf_s,
            "seed": args.seed,
        },
        "rows": rows,
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
