"""The real transformers MoE block on a GPU, its experts streamed from pinned host memory.

Builds transformers' own ``Qwen3MoeSparseMoeBlock``
(``transformers.models.qwen3_moe.modeling_qwen3_moe``: router ``gate`` = ``Qwen3MoeTopKRouter``,
linear → softmax → top-K → renormalised when ``norm_topk_prob``; ``experts`` =
``Qwen3MoeExperts``, 3-D ``gate_up_proj`` (E, 2f, d) and ``down_proj`` (E, d, f), SwiGLU) from a
random-initialised config (default 128 experts, top-8, hidden 2048, moe_intermediate 768 as
Qwen3-30B-A3B, bf16). One decode step of B tokens (one per stream) through one block:

- ``reference``: the block's own forward with every expert resident on the GPU (parity only);
- ``uncoalesced``: the router runs on the GPU, then token by token: copy the token's K experts
  (``gate_up_proj[e]`` and ``down_proj[e]``) from pinned host memory into the GPU copy of the
  block and apply the block's own experts forward to that token alone (B·K expert copies);
- ``coalesced``: the router runs on the GPU, each expert of the batch's union is copied once, then
  the block's own experts forward runs over the whole batch (its eager path loops over the hit
  experts, each applied to all of its tokens: U(B) expert copies);
- ``coalesced-grouped_mm`` (when transformers has it): the same copies, then the block's
  ``grouped_mm`` experts implementation (one grouped matmul, no host syncs per expert).

The GPU copy of the experts is poisoned with NaN before every parity run, so an expert the arm did
not copy would show in the output. Routers: ``uniform`` (the random-init router: near-uniform) and
``skewed`` (the same router with gate row e scaled by ``skew ** (1 - e / (E - 1))``: experts with
larger rows win the top-K more often). Timed with CUDA events after warm-up steps, fresh hidden
states (so fresh routing) every step, medians over the repeats. Also times each arm with its
copies left out (``compute_only``: the experts already resident) and with its compute left out
(``copy_only``), and the pinned host→device copy of one expert's two matrices.

Run on the device machine (PyTorch with CUDA), not part of CI:

    python3 benchmarks/hf_moe_block.py --out "$OUT/hf_moe_block.json"

A CPU smoke run (tiny sizes, no pinned memory, host timers): ``--device cpu --experts 8 --top-k 2
--hidden 64 --moe-intermediate 32 --batch 1,2,4 --repeats 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def _driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _shown(arg: str) -> str:
    """A command-line argument as recorded: the device machine's output folder as ``$OUT``."""
    out = os.environ.get("OUT")
    return arg.replace(out, "$OUT") if out else arg


def main(argv=None) -> int:
    import torch
    import transformers
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--moe-intermediate", type=int, default=768)
    ap.add_argument("--batch", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--routers", default="uniform,skewed")
    ap.add_argument("--skew", type=float, default=2.0, help="gate row 0 is scaled by this, the last row by 1")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    e_n, k, d, f = args.experts, args.top_k, args.hidden, args.moe_intermediate
    dtype = torch.bfloat16
    batches = [int(v) for v in args.batch.split(",")]
    routers = [r.strip() for r in args.routers.split(",") if r.strip()]
    torch.manual_seed(args.seed)
    torch.set_grad_enabled(False)

    cfg = Qwen3MoeConfig(
        hidden_size=d,
        moe_intermediate_size=f,
        num_experts=e_n,
        num_experts_per_tok=k,
        norm_topk_prob=True,
        hidden_act="silu",
        num_hidden_layers=1,
        vocab_size=128,
    )
    cfg._experts_implementation = "eager"
    init_std = float(getattr(cfg, "initializer_range", 0.02))

    # the reference block: every weight on the GPU, random-initialised as _init_weights does (normal,
    # std initializer_range); drawn on the device in float32, stored in bf16
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    ref = Qwen3MoeSparseMoeBlock(cfg).to(device=dev, dtype=dtype).eval()
    with torch.no_grad():
        for p in (ref.experts.gate_up_proj, ref.experts.down_proj, ref.gate.weight):
            for i in range(p.shape[0]):
                p[i].copy_(torch.randn(p.shape[1:], generator=gen, device=dev, dtype=torch.float32) * init_std)
        gate_uniform = ref.gate.weight.detach().clone()
        scale = args.skew ** (1.0 - torch.arange(e_n, device=dev, dtype=torch.float32) / max(e_n - 1, 1))
        gate_skewed = (gate_uniform.float() * scale[:, None]).to(dtype)
    # the experts in (pinned) host memory, one contiguous slab per expert and matrix
    pin = cuda
    gu_host = ref.experts.gate_up_proj.detach().to("cpu")
    dn_host = ref.experts.down_proj.detach().to("cpu")
    if pin:
        gu_host, dn_host = gu_host.pin_memory(), dn_host.pin_memory()
    gu_bytes = gu_host[0].numel() * gu_host.element_size()
    dn_bytes = dn_host[0].numel() * dn_host.element_size()
    expert_bytes = gu_bytes + dn_bytes
    # the streaming block: the same module class; its experts' GPU tensors are written only by copies
    stream = Qwen3MoeSparseMoeBlock(cfg).to(device=dev, dtype=dtype).eval()
    for p in (*ref.parameters(), *stream.parameters()):
        p.requires_grad_(False)
    gu_dev, dn_dev = stream.experts.gate_up_proj, stream.experts.down_proj

    has_grouped = False
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        has_grouped = cuda and "grouped_mm" in ALL_EXPERTS_FUNCTIONS
    except ImportError:
        pass
    arms = ["uncoalesced", "coalesced"]

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def copy_expert(e):
        gu_dev[e].copy_(gu_host[e], non_blocking=pin)
        dn_dev[e].copy_(dn_host[e], non_blocking=pin)

    def step(x, arm, copies=True, compute=True):
        """One decode step of the streaming block; returns (output, expert copies, union)."""
        cfg._experts_implementation = "grouped_mm" if arm == "coalesced-grouped_mm" else "eager"
        _, w, idx = stream.gate(x)
        ids = idx.to("cpu")  # the host must know the routing to issue the copies
        union = int(torch.unique(ids).numel())
        n = 0
        if arm == "uncoalesced":
            y = torch.empty_like(x)
            for t in range(x.shape[0]):
                if copies:
                    for e in ids[t].tolist():
                        copy_expert(e)
                        n += 1
                if compute:
                    y[t : t + 1] = stream.experts(x[t : t + 1], idx[t : t + 1], w[t : t + 1])
        else:
            if copies:
                for e in torch.unique(ids).tolist():
                    copy_expert(e)
                    n += 1
            y = stream.experts(x, idx, w) if compute else x
        return y, n, union, ids

    def timed(b, arm, router_w, copies=True, compute=True):
        with torch.no_grad():
            stream.gate.weight.copy_(router_w)
            if not copies:  # compute_only: every expert resident
                gu_dev.copy_(ref.experts.gate_up_proj)
                dn_dev.copy_(ref.experts.down_proj)
        times, wall, ns, unions, picks = [], [], [], [], []
        for i in range(args.warmup + args.repeats):
            x = torch.randn(b, d, generator=gen, device=dev, dtype=torch.float32).to(dtype)
            sync()
            t0 = time.perf_counter()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            _, n, u, ids = step(x, arm, copies=copies, compute=compute)
            if cuda:
                end.record()
                end.synchronize()
            t1 = time.perf_counter()
            if i < args.warmup:
                continue
            times.append(start.elapsed_time(end) / 1e3 if cuda else t1 - t0)
            wall.append(t1 - t0)
            ns.append(n)
            unions.append(u)
            picks.append(ids)
        return times, wall, ns, unions, torch.cat(picks)

    grouped_error = None
    if has_grouped:  # the grouped_mm implementation as a third arm, where this transformers and torch run it
        try:
            cfg._experts_implementation = "grouped_mm"
            x0 = torch.randn(4, d, generator=gen, device=dev, dtype=torch.float32).to(dtype)
            _, w0, i0 = ref.gate(x0)
            ref.experts(x0, i0, w0)
            sync()
            arms.append("coalesced-grouped_mm")
        except Exception as exc:  # recorded in the JSON, the other arms still run
            grouped_error = f"{type(exc).__name__}: {exc}"
        cfg._experts_implementation = "eager"

    machine = {
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "driver": _driver() if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }
    print(machine, flush=True)

    # the link as this run sees it: pinned copies of one expert's two matrices (not used by the model)
    link = {}
    for name, src, dst in (("gate_up", gu_host[0], gu_dev[0]), ("down", dn_host[0], dn_dev[0])):
        ts = []
        for i in range(23):
            sync()
            t0 = time.perf_counter()
            if cuda:
                s, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
            dst.copy_(src, non_blocking=pin)
            if cuda:
                en.record()
                en.synchronize()
            t1 = time.perf_counter()
            if i >= 3:
                ts.append(s.elapsed_time(en) / 1e3 if cuda else t1 - t0)
        nbytes = src.numel() * src.element_size()
        link[name] = {"bytes": nbytes, "seconds": statistics.median(ts), "bytes_per_s": nbytes / statistics.median(ts)}
    print("link", link, flush=True)

    # parity: each arm against the reference forward, the streaming copy poisoned with NaN first
    parity = []
    for router in routers:
        router_w = gate_uniform if router == "uniform" else gate_skewed
        with torch.no_grad():
            ref.gate.weight.copy_(router_w)
            stream.gate.weight.copy_(router_w)
            for b in batches:
                x = torch.randn(b, d, generator=gen, device=dev, dtype=torch.float32).to(dtype)
                cfg._experts_implementation = "eager"
                want = ref(x.view(b, 1, d)).view(b, d).float()
                for arm in arms:
                    gu_dev.fill_(float("nan"))
                    dn_dev.fill_(float("nan"))
                    got, _, _, _ = step(x, arm)
                    got = got.float()
                    err = (got - want).abs()
                    parity.append(
                        {
                            "router": router,
                            "batch": b,
                            "mode": arm,
                            "max_abs_error": float(err.max()),
                            "max_abs_reference": float(want.abs().max()),
                            "max_rel_error": float(err.max() / want.abs().max()),
                            "rel_l2_error": float(
                                torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)
                            ),
                            "finite": bool(torch.isfinite(got).all()),
                        }
                    )
        worst = max((p for p in parity if p["router"] == router), key=lambda p: p["rel_l2_error"])
        print(f"parity {router}: worst rel_l2 {worst['rel_l2_error']:.2e} ({worst['mode']}, B={worst['batch']})")
    cfg._experts_implementation = "eager"

    rows = []
    for router in routers:
        router_w = gate_uniform if router == "uniform" else gate_skewed
        for b in batches:
            for arm in arms:
                times, wall, ns, unions, picks = timed(b, arm, router_w)
                t_copy = timed(b, arm, router_w, compute=False)[0]
                t_comp = timed(b, arm, router_w, copies=False)[0]
                t = statistics.median(times)
                n_mean = statistics.mean(ns)
                counts = torch.bincount(picks.flatten(), minlength=e_n)
                rows.append(
                    {
                        "router": router,
                        "batch": b,
                        "mode": arm,
                        "step_seconds": t,
                        "step_seconds_each": times,
                        "wall_seconds_median": statistics.median(wall),
                        "net_tok_s": b / t,
                        "expert_copies_per_step": n_mean,
                        "bytes_per_step": n_mean * expert_bytes,
                        "union_per_step": statistics.mean(unions),
                        "copy_only_seconds": statistics.median(t_copy),
                        "compute_only_seconds": statistics.median(t_comp),
                        "expert_picks": counts.tolist(),
                        "steps_timed": len(times),
                    }
                )
                r = rows[-1]
                print(
                    f"{router:8s} B={b:4d} {arm:21s} step {t * 1e3:9.3f} ms  {b / t:9.1f} tok/s  "
                    f"{r['bytes_per_step'] / 1e9:7.3f} GB  U={r['union_per_step']:6.1f}  "
                    f"copy-only {r['copy_only_seconds'] * 1e3:8.3f} ms  compute-only {r['compute_only_seconds'] * 1e3:8.3f} ms",
                    flush=True,
                )

    result = {
        "what": "transformers Qwen3MoeSparseMoeBlock, experts streamed from pinned host memory (benchmarks/hf_moe_block.py)",
        "provenance": "witnessed",
        "machine": machine,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python3 benchmarks/hf_moe_block.py "
        + " ".join(_shown(a) for a in (argv if argv is not None else sys.argv[1:])),
        "arms": arms,
        "grouped_mm_error": grouped_error,
        "config": {
            "block": "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
            "experts": e_n,
            "top_k": k,
            "hidden_size": d,
            "moe_intermediate_size": f,
            "layers": 1,
            "dtype": "bfloat16",
            "norm_topk_prob": True,
            "init": f"normal(0, {init_std}) for router and experts, seed {args.seed}",
            "expert_bytes": expert_bytes,
            "copy_bytes": {"gate_up_proj": gu_bytes, "down_proj": dn_bytes},
            "flops_per_token": 2 * 3 * d * f * k,
            "pinned": pin,
            "routers": {
                "uniform": "the random-init router (near-uniform picks)",
                "skewed": f"gate row e scaled by {args.skew:g} ** (1 - e / (E - 1))",
            },
            "skew": args.skew,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "seed": args.seed,
            "timing": "CUDA events around router + routing to host + copies + experts" if cuda else "host timer",
        },
        "link_check": link,
        "parity": parity,
        "rows": rows,
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
