"""The cold-start page's child: one fresh process, one start of a compiled model.

``python -m gpuguide.chapters.coldstart_child CASE BLOCKS DIM DEVICE ARTIFACTS
DEEPEST`` compiles a stack of ``BLOCKS`` transformer blocks, times its first call
and steady state, and prints them for the parent
(:mod:`gpuguide.chapters.coldstart`) as one line of JSON after :data:`MARK`.
``CASE`` is ``cold``, ``warm``, ``Mega-Cache`` or ``regional``.
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gpuguide.timing import first_calls_s
from gpuguide.verdicts import interleave

#: Starts the line of the child's stdout that holds its result, as JSON.
MARK = "gpuguide-result: "
#: Dynamo's compile-time metrics that make up a first call, and what they are.
_PHASES = {
    "bytecode_tracing": "Dynamo's tracing",
    "build_guards": "building guards",
    "OutputGraph.call_user_compiler": "AOTAutograd and inductor",
}


def _describe_caches(counters: Mapping[str, Mapping[str, int]]) -> str:
    """What the FX graph and AOTAutograd caches did, from dynamo's ``counters``
    (any ``*cache_hit``/``_miss``/``_bypass`` key): ``"FX graph 1 hit"``."""
    parts = []
    for group, cache in {"inductor": "FX graph", "aot_autograd": "AOTAutograd"}.items():
        counts: Counter[str] = Counter()
        for key, value in counters.get(group, {}).items():
            prefix, _, outcome = key.rpartition("_")
            if outcome in ("hit", "miss", "bypass") and prefix.endswith("cache"):
                counts[outcome] += int(value)
        done = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
        parts += [f"{cache} {done}"] if done else []
    return "; ".join(parts) or "none used"


def _probe_cpu() -> None:
    """Inductor's probe of the CPU's vector instructions: a C++ build per process."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # pragma: no cover - inductor moved it
        return
    pick_vec_isa()


def _measure(
    model: Callable[[Any], Any],
    compiled: Callable[[Any], Any],
    x: Any,
    *,
    device: str,
    before: Callable[[], Any] | None = None,
    also: Mapping[str, Callable[[Any], Any]] | None = None,
) -> None:
    """Without gradients: time ``before()`` and the first call of ``compiled(x)``
    together, then ``model`` (eager), ``compiled`` and ``also``'s callables (first
    called untimed) in alternating rounds; print the result after :data:`MARK`."""
    import torch._inductor.compile_fx  # imported before anything is timed
    from torch._dynamo import utils
    from torch._inductor import async_compile

    probe_s = (
        first_calls_s(_probe_cpu, device=device, calls=1) if device == "cpu" else 0
    )
    variants = {"eager": model, "compiled": compiled, **(also or {})}
    with torch.no_grad():
        load_s = first_calls_s(before, device=device, calls=1) if before else 0.0
        first_s = first_calls_s(compiled, x, device=device, calls=1)
        caches = _describe_caches(utils.counters)
        metrics = getattr(utils, "compilation_time_metrics", {})
        timers = {k: sum(metrics[m]) for m, k in _PHASES.items() if m in metrics}
        for name in also or {}:
            variants[name](x)
        # the compile workers would take the CPU from the steady steps
        getattr(async_compile, "shutdown_compile_workers", lambda: None)()
        calls = {name: functools.partial(fn, x) for name, fn in variants.items()}
        timed = interleave(calls, rounds=10, rep_ms=60.0, device=device)
    result = {
        "first_s": load_s + first_s,
        "load_s": load_s,
        "probe_s": probe_s,
        "caches": caches,
        "phases": timers,
        "steady": {name: list(m.times_s) for name, m in timed.items()},
        "rounds": {name: list(m.rounds) for name, m in timed.items()},
    }
    print(MARK + json.dumps(result), flush=True)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        keep = None if pad is None else ~pad[:, None, None, :]  # pad: True = padding
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


def _by_blocks(model: nn.Sequential) -> nn.Sequential:
    for block in model:  # regional compilation: one compilation serves all N
        block.compile()
    return model


if __name__ == "__main__":
    case, blocks, dim, device, artifacts, deepest = sys.argv[1:]
    torch.set_float32_matmul_precision("high")  # TF32 on a GPU
    model = nn.Sequential(*[Block(int(dim)) for _ in range(int(blocks))])
    model = model.to(device).eval()
    x, eager = torch.randn(1, 64, int(dim), device=device), copy.deepcopy(model)
    compiled = _by_blocks(model) if case == "regional" else torch.compile(model)

    def load() -> None:  # Mega-Cache: a cold process's caches, saved as one blob
        torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())

    also: dict[str, nn.Module] = {}
    if case == "warm" and deepest == "True":  # compiled by blocks too, side by side
        also["regional"] = _by_blocks(copy.deepcopy(eager))
    before = load if case == "Mega-Cache" else None
    _measure(eager, compiled, x, device=device, before=before, also=also)
    if case == "cold" and (saved := torch.compiler.save_cache_artifacts()):
        Path(artifacts).write_bytes(saved[0])
