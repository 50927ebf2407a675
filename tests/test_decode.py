"""Chapter 15's decoder: what a step reads and computes, the cache written in place,
int8 weights within their bound, and the CUDA-graph capture (with fakes)."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from gpuguide.chapters import decode

SHAPE = decode.DecoderShape(dim=64, layers=2, heads=8, kv_heads=2, ffn=96, vocab=50)


def test_counts_match_the_model_it_builds():
    model = decode.random_decoder(SHAPE, device="cpu", dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    assert SHAPE.weight_bytes(2) == 2 * params
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert sum(m.weight.numel() for m in linears) == SHAPE.matmul_params
    # int8 weights read a bf16 scale per output row of each matmul
    rows = sum(m.out_features for m in linears)
    saved = SHAPE.step_bytes(1, 16, 2) - SHAPE.step_bytes(1, 16, 2, weight_itemsize=1)
    assert saved == SHAPE.matmul_params - 2 * rows
    model.setup_cache(3, 10)
    cache = sum(b.nbytes for b in model.buffers())
    assert cache == SHAPE.kv_cache_bytes(3, 10, 4)


def test_the_label_names_every_size_a_figure_depends_on():
    assert SHAPE.label == "2 layer(s) of dim 64, ffn 96, 8/2 heads, vocab 50"
    wider = dataclasses.replace(SHAPE, ffn=128)
    assert wider.label != SHAPE.label


def test_kv_bytes_grow_with_the_kv_heads_not_the_query_heads():
    # keys and values x layers x kv heads x head width x bytes
    assert SHAPE.kv_bytes_per_token(2) == 2 * 2 * 2 * 8 * 2
    full = dataclasses.replace(SHAPE, kv_heads=8)
    assert full.kv_bytes_per_token(2) == 4 * SHAPE.kv_bytes_per_token(2)
    assert SHAPE.kv_cache_bytes(4, 100, 2) == 400 * SHAPE.kv_bytes_per_token(2)


def test_step_flop_is_two_per_weight_and_token_plus_attention():
    attention = 4 * SHAPE.layers * SHAPE.heads * SHAPE.head_dim * 16
    assert SHAPE.step_flop(1, 16) == 2 * SHAPE.matmul_params + attention
    assert SHAPE.step_flop(8, 16) == 8 * SHAPE.step_flop(1, 16)
    assert SHAPE.step_flop(8, 0) == 16 * SHAPE.matmul_params


def test_step_bytes_read_weights_once_and_the_cache_per_sequence():
    one, two = SHAPE.step_bytes(1, 16, 2), SHAPE.step_bytes(2, 16, 2)
    per_sequence = SHAPE.kv_cache_bytes(1, 16, 2) + SHAPE.dim * 2
    assert two - one == per_sequence
    norms = (2 * SHAPE.layers + 1) * SHAPE.dim * 2
    assert one == 2 * SHAPE.matmul_params + norms + per_sequence
    assert SHAPE.step_bytes(1, 16, 2, weight_itemsize=2) == one


def test_a_shape_must_split_into_heads():
    with pytest.raises(ValueError, match="heads must divide dim"):
        decode.DecoderShape(dim=60, layers=1, heads=8, kv_heads=2, ffn=8, vocab=8)
    with pytest.raises(ValueError, match="kv_heads divide heads"):
        decode.DecoderShape(dim=64, layers=1, heads=8, kv_heads=3, ffn=8, vocab=8)
    with pytest.raises(ValueError, match="layers must be >= 1"):
        decode.DecoderShape(dim=64, layers=0, heads=8, kv_heads=2, ffn=8, vocab=8)


def test_the_static_cache_is_written_in_place_at_the_position():
    cache = decode._StaticCache(2, 3, 5, 4, dtype=torch.float32, device="cpu")
    k_before, v_before = cache.k.data_ptr(), cache.v.data_ptr()
    k, v = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    keys, values = cache.update(torch.tensor([2]), k, v)
    assert keys is cache.k
    assert keys.data_ptr() == k_before
    assert values.data_ptr() == v_before
    assert keys.shape == (2, 3, 5, 4)
    assert torch.equal(keys[:, :, 2:3], k)
    assert torch.equal(values[:, :, 2:3], v)
    others = torch.cat([keys[:, :, :2], keys[:, :, 3:]], dim=2)
    assert torch.count_nonzero(others) == 0


def test_a_step_matches_attention_over_the_filled_positions_only():
    model = decode.random_decoder(SHAPE, device="cpu", dtype=torch.float32)
    model.setup_cache(2, 8)
    tokens = torch.tensor([3, 7])
    for p in range(3):
        model(tokens, torch.tensor([p]))
    cached = model(tokens, torch.tensor([3]))
    model.setup_cache(2, 4)  # a cache that holds exactly the filled positions
    for p in range(3):
        model(tokens, torch.tensor([p]))
    exact = model(tokens, torch.tensor([3]))
    torch.testing.assert_close(cached, exact)
    assert cached.shape == (2, SHAPE.vocab)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_int8_round_trip_is_within_half_a_scale(dtype):
    torch.manual_seed(0)
    weight = (torch.randn(48, 80) * torch.logspace(-3, 1, 48)[:, None]).to(dtype)
    weight[5] = 0  # a row of zeros keeps a finite scale
    original = weight.clone()
    q, scales = decode.quantize_int8(weight)
    assert torch.equal(weight, original)  # the weights are left as they were
    assert q.dtype == torch.int8
    assert scales.dtype == dtype
    assert scales.shape == (48,)
    assert int(q.abs().max()) <= 127
    error = (q.float() * scales.float()[:, None] - weight.float()).abs()
    assert torch.all(error <= scales.float()[:, None] * 0.5 * (1 + 1e-5))
    assert torch.all(torch.isfinite(scales.float()))
    # Each nonzero row uses its range: its largest value maps to 126 or 127.
    assert int(q[0].abs().max()) >= 126


def test_cuda_graph_warms_up_on_a_side_stream_then_captures(monkeypatch):
    calls = []

    class FakeGraph:
        def replay(self):
            calls.append("replay")

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            calls.append(f"enter {self.name}")

        def __exit__(self, *exc):
            calls.append(f"exit {self.name}")

    class FakeStream:
        def wait_stream(self, other):
            calls.append("wait")

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: Recorder("side stream"))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: Recorder("capture"))
    replay = decode.cuda_graph(lambda: calls.append("step"))
    assert calls == [
        "wait", "enter side stream", "step", "step", "exit side stream", "wait",
        "enter capture", "step", "exit capture",
    ]  # fmt: skip
    replay()
    assert calls[-1] == "replay"


def test_stepper_marks_a_new_step_before_each_call(monkeypatch):
    seen = []
    monkeypatch.setattr(
        torch.compiler, "cudagraph_mark_step_begin", lambda: seen.append("mark")
    )
    step = decode.stepper(lambda a, b: seen.append((a, b)) or a + b, 2, 3)
    assert step() == 5
    assert seen == ["mark", (2, 3)]


def test_l2_cache_bytes_reads_the_device_and_falls_back(monkeypatch):
    assert decode.l2_cache_bytes("cpu") == 0  # no GPU cache to stream past
    asked = []

    def properties(device, size=50 * 2**20):
        asked.append(device)
        return types.SimpleNamespace(L2_cache_size=size)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert decode.l2_cache_bytes("cuda:1") == 50 * 2**20
    assert asked == [torch.device("cuda:1")]
    # A torch that does not say (no attribute, or 0): more than any GPU's L2.
    for props in (types.SimpleNamespace(), types.SimpleNamespace(L2_cache_size=0)):
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d, p=props: p)
        assert decode.l2_cache_bytes("cuda") == decode._L2_FALLBACK_BYTES
    assert decode._L2_FALLBACK_BYTES > 126 * 10**6  # a B200's, the largest so far
