"""The suite's words in plain language: one list, shown in docs/glossary.md and on the report index.

Reports and CLI notes use a few terms of the field and a few names of the documents the suite
answers (the "seeds"). Each is defined here once; :mod:`moeroof.present.site` renders the list on
``reports/index.html`` and ``tests/test_site.py`` checks that docs/glossary.md names every
term, so the two never drift apart.
"""

from __future__ import annotations

__all__ = ["GLOSSARY"]

#: (term, meaning), in the order a newcomer meets them
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("B", "the batch: how many agents (concurrent streams) decode one token each per step."),
    ("E, K", "routed experts per MoE layer, and how many of them each token uses (top-K)."),
    (
        "union, U(B)",
        "the distinct experts a batch of B tokens touches in one layer; between K (all agree) and min(B·K, E).",
    ),
    (
        "coalescing",
        "fetching (and running) each expert of the union once per step for every token that chose it, "
        "instead of once per token.",
    ),
    (
        "uncoalesced",
        "the baseline of a coalescing multiple: the same box, each token fetching its own K experts (B·K per layer).",
    ),
    ("single / independent-boxes", "other baselines: one agent alone on the box; B agents each on its own box."),
    ("dense band", "the non-routed weights (attention, shared experts, embeddings) read once per step, whatever B is."),
    ("expert cache", "RAM (or GPU memory) holding some experts, so a step streams only the misses."),
    ("hit rate", "the share of expert requests served from the cache rather than streamed."),
    (
        "LRU, LFU, S3-FIFO, ARC, Belady",
        "cache policies: least recently used, least frequently used, S3-FIFO and ARC (adaptive "
        "queues), and Belady's offline optimum (evicts the item used furthest in the future).",
    ),
    (
        "binding term",
        "the roofline term that sets the step time: ssd (or the PCIe / host link), memory, compute, fabric.",
    ),
    ("skew", "how unevenly the router spreads tokens over experts: Zipf exponent s, or Dirichlet concentration α."),
    (
        "stickiness ρ, locality c",
        "how much a stream keeps its own experts over time (ρ: the chance each of a stream's K "
        "experts is kept from its previous step; c: how strongly a stream keeps a lasting hot set "
        "of its own, smaller c = stronger).",
    ),
    (
        "provenance",
        "where a number comes from: witnessed (measured on a real system), projected (a model, or "
        "synthetic data), assumed (an input nobody measured; anything resting on it is projected).",
    ),
    ("rank, pair, M", "a node of a multi-node run; two such nodes; M concurrent streams on them."),
    ("booster", "one GB10 machine (the name used by seed 003's lab report)."),
    (
        "seed 000",
        "the design note that claims coalescing gives '4–10×+' net tok/s over B independent "
        "uncoalesced streams on an SSD-offloaded GLM-5.2.",
    ),
    (
        "seed 003",
        "a lab report on a two-GB10 run of a GLM-5 MoE engine (288 experts, top-8): the pair, its "
        "expert cache ladder and partitions; some rows are withheld to test predictions.",
    ),
    (
        "colibri, bigrig",
        "public projects whose published measurements the models are held against (an SSD-streaming "
        "GLM-5.2 engine; a Qwen3-30B-A3B batch benchmark on an Apple M4).",
    ),
)
