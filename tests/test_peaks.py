"""Tests for gpuguide.peaks: datasheet lookups from fake properties, a fake benchmark."""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType, SimpleNamespace

import pytest
import torch

from gpuguide import device as device_mod
from gpuguide import peaks as peaks_mod
from gpuguide.device import _NAMES as NAMES
from gpuguide.device import GpuState
from gpuguide.device import _identify_gpu as identify_gpu
from gpuguide.peaks import _FIGURES as FIGURES
from gpuguide.peaks import _GPU_PEAKS as GPU_PEAKS
from gpuguide.peaks import _PEAK_TOLERANCE as PEAK_TOLERANCE
from gpuguide.peaks import _SOURCES as SOURCES
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.peaks import _with_negotiated_link as with_negotiated_link
from gpuguide.timing import Measurement

GiB = 2**30
T = 1e12
ABOVE = "a datasheet peak is a ceiling"  # the ValueError of a rate above one


def gpu_peaks(name, sms, memory):
    """device_peaks of a CUDA device with these properties (NVML not asked)."""
    info = device_mod._describe_host("cpu", "")
    variant = identify_gpu(name, sms, memory)
    return device_peaks(
        dataclasses.replace(info, type="cuda", name=name, variant=variant)
    )


# (name as CUDA reports it, SMs, total_memory as torch reports it, expected key)
KNOWN_GPUS = [
    ("NVIDIA H100 80GB HBM3", 132, 85_045_379_072, "H100 SXM5"),
    ("NVIDIA H100 PCIe", 114, 85_031_714_816, "H100 PCIe"),
    ("NVIDIA H100 NVL", 132, 100_485_038_080, "H100 NVL"),
    ("NVIDIA H200", 132, 150_021_488_640, "H200 SXM"),
    ("NVIDIA H200 NVL", 132, 150_000_000_000, "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", 108, 85_198_045_184, "A100 SXM4 80GB"),
    ("NVIDIA A100-SXM4-40GB", 108, 42_505_273_344, "A100 SXM4 40GB"),
    ("NVIDIA A100-PCIE-40GB", 108, 42_314_694_656, "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", 108, 85_100_068_864, "A100 PCIe 80GB"),
    ("NVIDIA A10G", 80, 23_609_475_072, "A10G"),
    ("NVIDIA A10", 72, 23_827_824_640, "A10"),
    ("NVIDIA L4", 58, 23_580_639_232, "L4"),
    ("Tesla T4", 40, 15_835_660_288, "T4"),
    ("NVIDIA GeForce RTX 4090", 128, 25_393_692_672, "RTX 4090"),
]

REQUIRED_KEYS = {
    "H100 SXM5",
    "H100 PCIe",
    "H100 NVL",
    "H200 SXM",
    "H200 NVL",
    "A100 SXM4 80GB",
    "A100 SXM4 40GB",
    "A100 PCIe 80GB",
    "A100 PCIe 40GB",
    "A10G",
    "L4",
    "T4",
    "RTX 4090",
}


# --------------------------------------------------------------------------------------
# identify_gpu and gpu_peaks
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "sms", "memory", "key"), KNOWN_GPUS)
def test_identify_known_gpus(name, sms, memory, key):
    assert identify_gpu(name, sms, memory) == key
    # The name alone is enough when the properties are not reported.
    assert identify_gpu(name, None, None) == key
    assert gpu_peaks(name, sms, memory) is GPU_PEAKS[key]


@pytest.mark.parametrize(
    ("name", "sms", "memory"),
    [
        ("NVIDIA Foo 9000", 132, 80 * GiB),
        # Names that contain a known one but are other GPUs.
        ("NVIDIA A10", 80, 23_609_475_072),  # an A10's name with an A10G's SMs
        ("NVIDIA A10G", 72, 23_609_475_072),
        ("NVIDIA A100", 108, 85_198_045_184),
        ("NVIDIA A1000", 18, 8 * GiB),
        ("NVIDIA H20", 78, 96 * GiB),
        ("NVIDIA H800", 132, 80 * GiB),
        ("NVIDIA GH200 480GB", 132, 95 * GiB),
        ("NVIDIA H100 NVL", 132, 79 * GiB),  # an NVL's name with 80 GB: contradicts
        ("NVIDIA H200 NVL", 114, 140 * GiB),
        ("NVIDIA H100 80GB HBM3", 114, 85_045_379_072),
        ("NVIDIA L40S", 142, 44 * GiB),
        ("NVIDIA L40", 142, 44 * GiB),
        ("NVIDIA GeForce RTX 4090 D", 114, 23 * GiB),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", 76, 16 * GiB),
        ("Tesla T4G", 40, 15 * GiB),
        # A MIG slice reports its own name, SMs and memory: not the whole GPU.
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, 10 * GiB),
        ("NVIDIA A100-SXM4-40GB", 14, 4 * GiB),
        ("", None, None),
    ],
)
def test_identify_never_guesses(name, sms, memory):
    assert identify_gpu(name, sms, memory) is None
    peaks = gpu_peaks(name, sms, memory)
    assert peaks.known is False
    assert all(value is None for value in peaks.flops.values())
    assert peaks.memory_bandwidth_bytes_per_s is None
    assert peaks.host_link_bytes_per_s is None


def test_bare_h100_name_needs_matching_details():
    assert identify_gpu("NVIDIA H100", 132, 85_045_379_072) == "H100 SXM5"
    assert identify_gpu("NVIDIA H100", None, None) is None
    assert identify_gpu("NVIDIA H100", 132, None) is None
    assert identify_gpu("NVIDIA H100", 114, 85_045_379_072) is None
    assert identify_gpu("NVIDIA H100", 132, 94 * GiB) is None


def test_identify_is_case_and_separator_insensitive():
    assert identify_gpu("nvidia a100_sxm4_80gb", 108, None) == "A100 SXM4 80GB"
    assert identify_gpu("  NVIDIA   H100  NVL ", None, None) == "H100 NVL"


def test_unknown_gpu_peaks():
    peaks = gpu_peaks("NVIDIA Foo 9000", 200, 200 * GiB)
    assert peaks.name == "unknown GPU (NVIDIA Foo 9000)"
    assert peaks.known is False
    assert dict(peaks.flops) == dict.fromkeys(peaks_mod._FLOPS_KEYS)
    assert peaks.flops_for(torch.bfloat16) is None
    assert "unknown" in peaks.source


# --------------------------------------------------------------------------------------
# The datasheet table
# --------------------------------------------------------------------------------------


def test_table_has_the_required_gpus():
    assert set(GPU_PEAKS) >= REQUIRED_KEYS
    for key, peaks in GPU_PEAKS.items():
        assert peaks.name == key
        assert peaks.known is True
        assert peaks.source
        assert peaks.memory_bandwidth_bytes_per_s is not None
        assert peaks.host_link_bytes_per_s is not None
        assert peaks.flops["fp32"] is not None


def test_every_variant_is_identifiable():
    identified = {key for *_, key in KNOWN_GPUS}
    assert identified == set(GPU_PEAKS)


def test_the_datasheet_is_plain_rows_with_sources():
    variants = [row.variant for row in FIGURES]
    assert len(variants) == len(set(variants))
    assert {rule.variant for rule in NAMES} == set(variants)
    for row in FIGURES:
        assert row.source in SOURCES, row
        peaks = GPU_PEAKS[row.variant]
        assert peaks.source == SOURCES[row.source]
        assert peaks.flops["bf16"] == (row.bf16_tflops and row.bf16_tflops * T)
        assert peaks.memory_bandwidth_bytes_per_s == row.memory_gb_per_s * 1e9


def test_table_is_internally_consistent():
    for peaks in GPU_PEAKS.values():
        flops = peaks.flops
        for low, high in (("fp64", "fp32"), ("fp32", "tf32"), ("tf32", "fp16")):
            if flops[low] is not None and flops[high] is not None:
                assert flops[low] <= flops[high], (peaks.name, low, high)
        if flops["bf16"] is not None:
            assert flops["bf16"] == flops["fp16"]


@pytest.mark.parametrize(
    ("key", "fp64", "fp32", "tf32", "bf16", "memory", "link"),
    [
        # fp64: the FP64 tensor-core figure where the GPU has one (a matmul peak)
        ("H100 SXM5", 67, 67, 494.5, 989.5, 3.35e12, 64e9),
        ("H100 PCIe", 51, 51, 378, 756.5, 2.0e12, 64e9),
        ("H100 NVL", 60, 60, 417.5, 835.5, 3.9e12, 64e9),
        ("H200 SXM", 67, 67, 494.5, 989.5, 4.8e12, 64e9),
        ("H200 NVL", 60, 60, 417.5, 835.5, 4.8e12, 64e9),
        ("A100 SXM4 80GB", 19.5, 19.5, 156, 312, 2.039e12, 32e9),
        ("A100 SXM4 40GB", 19.5, 19.5, 156, 312, 1.555e12, 32e9),
        ("A100 PCIe 80GB", 19.5, 19.5, 156, 312, 1.935e12, 32e9),
        ("A100 PCIe 40GB", 19.5, 19.5, 156, 312, 1.555e12, 32e9),
        ("L4", None, 30.3, 60, 121, 300e9, 32e9),
        ("T4", 0.25, 8.1, None, None, 320e9, 16e9),
        ("RTX 4090", None, 82.6, 82.6, 165.2, 1008e9, 32e9),
    ],
)
def test_datasheet_figures(key, fp64, fp32, tf32, bf16, memory, link):
    peaks = GPU_PEAKS[key]

    def tflops(value):
        return None if value is None else pytest.approx(value * T)

    assert peaks.flops["fp64"] == tflops(fp64)
    assert peaks.flops["fp32"] == tflops(fp32)
    assert peaks.flops["tf32"] == tflops(tf32)
    assert peaks.flops["bf16"] == tflops(bf16)
    assert peaks.memory_bandwidth_bytes_per_s == pytest.approx(memory)
    assert peaks.host_link_bytes_per_s == pytest.approx(link)
    assert "datasheet" in peaks.source or "whitepaper" in peaks.source


def test_t4_has_fp16_but_no_bf16_or_tf32():
    t4 = GPU_PEAKS["T4"]
    assert t4.flops_for(torch.float16) == pytest.approx(65 * T)
    assert t4.flops_for(torch.bfloat16) is None
    assert t4.flops_for(torch.float32, tf32=True) is None


def test_a10g_leaves_uncertain_figures_unknown():
    a10g = GPU_PEAKS["A10G"]
    assert a10g.memory_bandwidth_bytes_per_s == pytest.approx(600e9)
    assert a10g.flops_for("bf16") is None
    assert a10g.flops_for("tf32") is None
    assert "no NVIDIA datasheet" in a10g.source


def test_h200_differs_from_h100_only_in_memory():
    h100, h200 = GPU_PEAKS["H100 SXM5"], GPU_PEAKS["H200 SXM"]
    assert dict(h100.flops) == dict(h200.flops)
    ratio = h200.memory_bandwidth_bytes_per_s / h100.memory_bandwidth_bytes_per_s
    assert ratio == pytest.approx(4.8 / 3.35)


# Vector FP64 of the GPUs that have FP64 tensor cores, from their datasheets: the
# tensor-core figure, their fp64 matmul peak, is twice it on all of them.
FP64_VECTOR = {
    "H100 SXM5": 34,
    "H100 PCIe": 26,
    "H100 NVL": 30,
    "H200 SXM": 34,
    "H200 NVL": 30,
    "A100 SXM4 80GB": 9.7,
    "A100 SXM4 40GB": 9.7,
    "A100 PCIe 80GB": 9.7,
    "A100 PCIe 40GB": 9.7,
}


def test_fp64_matmul_peak_is_the_tensor_core_figure():
    for variant, vector in FP64_VECTOR.items():
        tensor = GPU_PEAKS[variant].flops_for(torch.float64)
        assert tensor == pytest.approx(2 * vector * T, rel=0.02)


def test_every_source_names_its_document():
    for key, text in SOURCES.items():
        assert key in text or "A10G" in key, key
        if key != "A10G":  # AWS publishes no datasheet for it
            assert "datasheet" in text or "whitepaper" in text, key
    used = {row.source for row in FIGURES}
    assert used == set(SOURCES)


def test_the_h100_fp64_page_bug_cannot_come_back():
    # The H100 build measured fp64 matmuls at 59.8 TFLOP/s: 176% of the vector
    # figure, 89% of the tensor-core one that the table now lists.
    assert GPU_PEAKS["H100 SXM5"].percent_of(59.8e12, torch.float64) == (
        pytest.approx(89.25, abs=0.01)
    )
    vector = Peaks(name="vector fp64", flops={"fp64": 34e12}, source="old row")
    with pytest.raises(ValueError, match=ABOVE):
        vector.percent_of(59.8e12, "fp64")


# --------------------------------------------------------------------------------------
# The Peaks object
# --------------------------------------------------------------------------------------


def test_peaks_is_frozen_and_flops_read_only():
    peaks = GPU_PEAKS["H100 SXM5"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        peaks.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        peaks.flops["fp32"] = 1.0  # type: ignore[index]
    assert tuple(peaks.flops) == peaks_mod._FLOPS_KEYS


def test_peaks_fills_missing_precisions_and_copies_input():
    source = {"fp32": 1e12}
    peaks = Peaks(name="x", flops=source, source="test")
    source["fp32"] = 5.0
    assert peaks.flops["fp32"] == 1e12
    assert peaks.flops["bf16"] is None
    assert peaks.known is True


def test_peaks_equality():
    a = Peaks(name="x", flops={"fp32": 1e12}, memory_bandwidth_bytes_per_s=1e11)
    b = Peaks(
        name="x", flops={"fp32": 1e12, "fp16": None}, memory_bandwidth_bytes_per_s=1e11
    )
    c = Peaks(name="x", flops={"fp32": 2e12}, memory_bandwidth_bytes_per_s=1e11)
    assert a == b
    assert a != c


@pytest.mark.parametrize(
    ("dtype", "tf32", "expected"),
    [
        (torch.float64, False, 67),
        (torch.float32, False, 67),
        (torch.float32, True, 494.5),
        (torch.float16, False, 989.5),
        (torch.bfloat16, False, 989.5),
        (torch.bfloat16, True, 989.5),  # tf32 only concerns fp32
        ("fp64", False, 67),
        ("fp32", False, 67),
        ("fp32", True, 494.5),
        ("tf32", False, 494.5),
        ("fp16", False, 989.5),
        ("bf16", False, 989.5),
    ],
)
def test_flops_for(dtype, tf32, expected):
    assert GPU_PEAKS["H100 SXM5"].flops_for(dtype, tf32=tf32) == pytest.approx(
        expected * T
    )


@pytest.mark.parametrize("dtype", [torch.int8, torch.complex64, "fp8", "float32", 3])
def test_flops_for_unknown_dtype(dtype):
    with pytest.raises(ValueError, match="dtype must be"):
        GPU_PEAKS["H100 SXM5"].flops_for(dtype)


# --------------------------------------------------------------------------------------
# Peaks.percent_of
# --------------------------------------------------------------------------------------


def test_tolerance_allows_noise_not_a_wrong_row():
    assert 1.0 < PEAK_TOLERANCE <= 1.05
    # A vector figure held against tensor cores is off by 2x, sparsity by 2x.
    assert PEAK_TOLERANCE < 2.0


# Fake peaks: a "datasheet" device and a "measured" one, round numbers.
SHEET = Peaks(
    name="Fake GPU",
    flops={"fp64": 10e12, "fp32": 20e12, "tf32": 100e12, "bf16": 400e12},
    memory_bandwidth_bytes_per_s=1e12,
    host_link_bytes_per_s=50e9,
    source="fake datasheet",
)
MEASURED = Peaks(
    name="CPU: fake",
    flops={"fp32": 1e11, "fp64": 5e10},
    memory_bandwidth_bytes_per_s=1e10,
    source="measured",
    measured=True,
    detail="fake",
)


@pytest.mark.parametrize(
    ("rate", "of", "expected"),
    [
        (5e12, torch.float64, 50.0),
        (5e12, "fp64", 50.0),
        (10e12, torch.float32, 50.0),
        (50e12, "tf32", 50.0),
        (300e12, torch.bfloat16, 75.0),
        (101e12, "tf32", 100.0),  # within the tolerance
        (0.8e12, "memory", 80.0),
        (40e9, "host_link", 80.0),
        (1e12, torch.float16, None),  # unknown peak
    ],
)
def test_percent_of_a_datasheet_peak(rate, of, expected):
    result = SHEET.percent_of(rate, of)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rate", "of", "named"),
    [
        (17.6e12, torch.float64, "fp64 matmul rate of 17.6 TFLOP/s"),
        (25e12, "fp32", "fp32 matmul rate of 25.0 TFLOP/s"),
        (120e12, "tf32", "tf32 matmul rate of 120 TFLOP/s"),
        (1.5e12, "memory", "memory bandwidth rate of 1.50 TB/s"),
        (64e9, "host_link", "host-link bandwidth rate of 64.0 GB/s"),
    ],
)
def test_a_rate_above_a_datasheet_peak_is_an_error(rate, of, named):
    with pytest.raises(ValueError, match=ABOVE) as caught:
        SHEET.percent_of(rate, of)
    message = str(caught.value)
    assert message.startswith("Fake GPU: a measured ")
    assert named in message
    assert "of the listed peak" in message
    assert "fake datasheet" in message
    assert "the datasheet row is wrong or the measurement is" in message


def test_a_real_row_raises_for_the_old_vector_fp64_reading():
    # 2x the H100's FP64 tensor-core peak: what a wrong FLOP count would give.
    with pytest.raises(ValueError, match=r"H100 SXM5.*fp64.*134 TFLOP/s"):
        GPU_PEAKS["H100 SXM5"].percent_of(134e12, torch.float64)


@pytest.mark.parametrize(
    ("rate", "of", "expected"),
    [
        (5e10, "fp32", 50.0),
        (1e11, "fp32", 100.0),
        (1.5e11, torch.float32, 100.0),  # a new best: never above 100
        (1e12, "fp64", 100.0),
        (2e10, "memory", 100.0),
        (5e9, "memory", 50.0),
        (1e9, "bf16", None),
        (1e9, "host_link", None),
    ],
)
def test_percent_of_a_measured_ceiling_never_exceeds_100(rate, of, expected):
    result = MEASURED.percent_of(rate, of)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


def test_percent_of_unknown_peaks_is_none():
    unknown = gpu_peaks("NVIDIA Foo 9000", 1, 1)
    assert unknown.percent_of(1e15, torch.bfloat16) is None
    assert unknown.percent_of(1e15, "memory") is None


@pytest.mark.parametrize(
    ("rate", "of", "error"),
    [
        (1.0, "fp8", "dtype must be"),
        (1.0, "bandwidth", "dtype must be"),
        (-1.0, "fp32", "rate"),
        (math.nan, "memory", "rate"),
    ],
)
def test_percent_of_rejects_bad_input(rate, of, error):
    with pytest.raises(ValueError, match=error):
        SHEET.percent_of(rate, of)


# --------------------------------------------------------------------------------------
# Measured CPU peaks
# --------------------------------------------------------------------------------------


class FakeBench:
    """Stands in for gpuguide.timing.benchmark: times from a model, no real timing.

    A matmul of side n takes ``2 n^3 / rate(n)`` at its best call and ``spread``
    times that at its median; a bandwidth kernel takes the bytes it moves over
    ``bandwidth[label]``. Small matmuls and the bandwidth kernels really run once,
    so the test can check what was computed.
    """

    MOVES = MappingProxyType({"copy": 2, "add": 3, "sum": 1})  # bytes per tensor byte

    def __init__(self, rate, bandwidth=None, spread=1.25):
        self.rate, self.spread = rate, spread
        self.bandwidth = bandwidth or dict.fromkeys(self.MOVES, 1e10)
        self.calls = []

    def __call__(self, fn, *, args=(), kwargs=None, label=None, **options):
        call = {"label": label, "args": args, **options}
        self.calls.append(call)
        if label in self.MOVES:
            call["result"] = fn(*args)
            nbytes = args[0].numel() * args[0].element_size()
            best = self.MOVES[label] * nbytes / self.bandwidth[label]
        else:
            n = args[0].shape[0]
            if n <= 64:
                call["result"] = fn(*args, **(kwargs or {}))
            best = 2 * n**3 / self.rate(n)
        return Measurement(
            label=label or "x",
            times_s=(best, best * self.spread, best * self.spread * 1.5),
            device="cpu",
            method="wall-clock",
        )

    def matmul_sizes(self):
        return [
            c["args"][0].shape[0] for c in self.calls if c["label"] not in self.MOVES
        ]


TINY = peaks_mod._CpuPlan(
    first_n=16, min_n=32, max_n=256, call_s=1e-3, warmup_ms=1, rep_ms=1
)


@pytest.fixture
def tiny(monkeypatch):
    """The small plan made tiny, with 4 KiB tensors for the bandwidth kernels."""
    monkeypatch.setitem(peaks_mod._CPU_PLANS, True, TINY)
    monkeypatch.setattr(peaks_mod, "streaming_bytes", lambda small: 4096)


def test_measure_cpu_peaks_keeps_the_best_size(tiny):
    # The rate peaks at n=64 and falls after; every size up to 256 fits call_s.
    bandwidth = {"copy": 2e10, "add": 1e10, "sum": 1.5e10}
    bench = FakeBench(lambda n: 1e12 if n == 64 else 5e11, bandwidth=bandwidth)
    peaks = peaks_mod._measure_cpu_peaks(True, bench=bench)
    assert bench.matmul_sizes() == [16, 32, 64, 128, 256] * 2  # fp32, then fp64
    assert peaks.flops["fp32"] == pytest.approx(1e12)
    assert peaks.flops["fp64"] == pytest.approx(1e12)
    assert peaks.memory_bandwidth_bytes_per_s == pytest.approx(2e10)
    assert peaks.flops["tf32"] is peaks.flops["fp16"] is peaks.flops["bf16"] is None
    assert peaks.host_link_bytes_per_s is None
    assert peaks.name.startswith("CPU: ")
    assert peaks.known is True
    assert peaks.measured is True
    assert "measured" in peaks.source
    # Where the best rate was found.
    assert "fp32 1.00 TFLOP/s at n=64;" in peaks.detail
    assert f"{torch.get_num_threads()} torch thread" in peaks.detail
    fp32 = next(c for c in bench.calls if "result" in c)
    assert fp32["device"] == "cpu"
    a, b = fp32["args"]
    torch.testing.assert_close(fp32["result"], a @ b)
    assert fp32["result"].dtype == torch.float32
    fp64 = [c for c in bench.calls if c["label"].startswith("fp64")]
    assert all(c["args"][0].dtype == torch.float64 for c in fp64)
    kernels = {c["label"]: c for c in bench.calls if c["label"] in FakeBench.MOVES}
    assert set(kernels) == {"copy", "add", "sum"}
    for call in kernels.values():
        assert call["args"][0].numel() * 4 == 4096
        assert call["device"] == "cpu"
    x, y = kernels["add"]["args"]
    assert torch.equal(kernels["add"]["result"], x + y)  # the add really ran
    assert kernels["sum"]["result"].item() == x.numel()
    assert "memory 20.0 GB/s by a copy of 4.00 KiB tensors" in peaks.detail


@pytest.mark.parametrize("fastest", ["copy", "add", "sum"])
def test_memory_ceiling_is_the_best_streaming_kernel(tiny, fastest):
    bandwidth = dict.fromkeys(FakeBench.MOVES, 1e10) | {fastest: 3e10}
    bench = FakeBench(lambda n: 1e9, bandwidth=bandwidth)
    peaks = peaks_mod._measure_cpu_peaks(True, bench=bench)
    assert peaks.memory_bandwidth_bytes_per_s == pytest.approx(3e10)
    assert f" {fastest} of " in peaks.detail


def test_measure_cpu_peaks_stops_growing_when_calls_get_long(tiny):
    # 1 GFLOP/s: n=32 takes 65 us, n=64 0.5 ms; the next size (4 ms) would not fit
    # call_s (1 ms), but sizes up to min_n are always measured.
    bench = FakeBench(lambda n: 1e9)
    peaks_mod._measure_cpu_peaks(True, bench=bench)
    assert bench.matmul_sizes() == [16, 32, 64] * 2
    slow = FakeBench(lambda n: 1e6)  # even min_n is slow: it is still measured
    peaks_mod._measure_cpu_peaks(True, bench=slow)
    assert slow.matmul_sizes() == [16, 32] * 2


def test_cpu_plans_small_mode_is_smaller():
    small, full = peaks_mod._CPU_PLANS[True], peaks_mod._CPU_PLANS[False]
    assert small.max_n < full.max_n
    assert small.min_n < full.min_n
    assert small.call_s < full.call_s
    assert 1024 <= full.min_n <= full.max_n <= 4096  # a large matmul, not a quick one


MiB, GiB = 2**20, 2**30


@pytest.mark.parametrize(
    ("cache", "available", "nbytes"),
    [
        (32 * MiB, 64 * GiB, 256 * MiB),
        (48 * MiB, 64 * GiB, 512 * MiB),  # a power of 2
        (4 * MiB, 64 * GiB, 64 * MiB),  # the floor
        (384 * MiB, 64 * GiB, 2 * GiB),
        (768 * MiB, 256 * GiB, 2 * GiB),  # at most 2 GiB
        (768 * MiB, 16 * GiB, 1 * GiB),  # a sixteenth of the memory
        (32 * MiB, 512 * MiB, 64 * MiB),  # the floor
        (None, 64 * GiB, 512 * MiB),  # an assumed 64 MiB cache
    ],
)
def test_streaming_bytes_outgrow_the_last_level_caches(
    monkeypatch, cache, available, nbytes
):
    monkeypatch.setattr(peaks_mod.host, "last_level_cache_bytes", lambda: cache)
    monkeypatch.setattr(peaks_mod.host, "available_memory_bytes", lambda: available)
    assert peaks_mod.streaming_bytes(small=False) == nbytes
    assert peaks_mod.streaming_bytes(small=True) == 32 * MiB  # quick, in the caches


def test_memory_ceiling_streams_tensors_past_the_caches(monkeypatch):
    monkeypatch.setitem(peaks_mod._CPU_PLANS, True, TINY)
    monkeypatch.setattr(peaks_mod, "streaming_bytes", lambda small: 16 * 2**10)
    bench = FakeBench(lambda n: 1e9)
    peaks = peaks_mod._measure_cpu_peaks(True, bench=bench)
    kernels = [c for c in bench.calls if c["label"] in FakeBench.MOVES]
    assert {c["args"][0].numel() * 4 for c in kernels} == {16 * 2**10}
    assert "of 16.0 KiB tensors" in peaks.detail


def test_measure_cpu_peaks_rejects_bad_times(tiny):
    with pytest.raises(RuntimeError, match="best time must be > 0"):
        peaks_mod._measure_cpu_peaks(True, bench=FakeBench(lambda n: math.inf))


def test_measure_cpu_peaks_is_cached(monkeypatch):
    calls = []

    def fake(plan, bench):
        calls.append(plan)
        return 1e9, "fake"

    monkeypatch.setattr(peaks_mod, "_matmul_ceiling", lambda *args: fake(*args[2:]))
    monkeypatch.setattr(peaks_mod, "_bandwidth_ceiling", lambda *args: fake(*args[:2]))
    peaks_mod._measure_cpu_peaks.cache_clear()
    try:
        monkeypatch.setenv("GPUGUIDE_SMALL", "1")
        first = device_peaks("cpu")
        assert device_peaks("cpu") is first
        assert calls == [peaks_mod._CPU_PLANS[True]] * 3
        monkeypatch.setenv("GPUGUIDE_SMALL", "0")
        assert device_peaks("cpu") is not first
        assert calls[3:] == [peaks_mod._CPU_PLANS[False]] * 3
        # a page that sets another thread count gets peaks measured with it
        threads = torch.get_num_threads()
        torch.set_num_threads(threads + 1)
        try:
            other = device_peaks("cpu")
            assert len(calls) == 9
            assert device_peaks("cpu") is other
        finally:
            torch.set_num_threads(threads)
    finally:
        peaks_mod._measure_cpu_peaks.cache_clear()


def test_measure_cpu_peaks_really_measures(monkeypatch):
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    peaks_mod._measure_cpu_peaks.cache_clear()
    peaks = device_peaks("cpu")
    for value in (
        peaks.flops["fp32"],
        peaks.flops["fp64"],
        peaks.memory_bandwidth_bytes_per_s,
    ):
        assert value is not None
        assert math.isfinite(value)
        assert value > 1e6  # any CPU does a million FLOP (or bytes) per second
    assert peaks.name.startswith("CPU: ")
    assert peaks.source == "measured on this CPU (best achieved, not a datasheet)"
    assert peaks.measured is True
    assert "fp32" in peaks.detail
    assert "memory" in peaks.detail
    assert device_peaks("cpu") is peaks


# --------------------------------------------------------------------------------------
# device_peaks
# --------------------------------------------------------------------------------------


def test_device_peaks_cpu_is_measured(monkeypatch):
    sentinel = Peaks(name="CPU: fake", flops={"fp32": 1e9}, source="measured")
    monkeypatch.setattr(
        peaks_mod, "_measure_cpu_peaks", lambda small, threads: sentinel
    )
    assert device_peaks("cpu") is sentinel
    info = device_mod._describe_host("cpu", "")
    assert device_peaks(info) is sentinel


def test_device_peaks_default_device(monkeypatch):
    monkeypatch.delenv("GPUGUIDE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "_mps_available", lambda: False)
    sentinel = Peaks(name="CPU: fake", flops={}, source="measured")
    monkeypatch.setattr(
        peaks_mod, "_measure_cpu_peaks", lambda small, threads: sentinel
    )
    assert device_peaks() is sentinel


def test_device_peaks_cuda_from_properties(monkeypatch):
    props = SimpleNamespace(
        name="NVIDIA H200",
        multi_processor_count=132,
        total_memory=150_021_488_640,
        major=9,
        minor=0,
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    assert device_peaks("cuda") is GPU_PEAKS["H200 SXM"]


def test_device_peaks_from_device_info():
    props = SimpleNamespace(
        name="NVIDIA A100-SXM4-80GB",
        multi_processor_count=108,
        total_memory=85_198_045_184,
        major=8,
        minor=0,
    )
    info = device_mod._describe_cuda(
        0, props, torch_version="2.13.0", cuda_version="12.8", driver_version=None
    )
    assert device_peaks(info) is GPU_PEAKS["A100 SXM4 80GB"]
    unknown = dataclasses.replace(info, name="NVIDIA Foo 9000", variant=None)
    assert device_peaks(unknown).known is False


def test_device_peaks_mps_is_unknown(monkeypatch):
    monkeypatch.setattr(device_mod, "_mps_available", lambda: True)
    peaks = device_peaks("mps")
    assert peaks.known is False
    assert peaks.name == "Apple GPU (MPS)"
    assert all(value is None for value in peaks.flops.values())
    info = dataclasses.replace(device_mod._describe_host("cpu", ""), type="mps")
    assert device_peaks(info) == peaks


@pytest.mark.gpu
def test_device_peaks_real_cuda():
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    peaks = device_peaks("cuda")
    expected = identify_gpu(props.name, props.multi_processor_count, props.total_memory)
    if expected is None:
        assert peaks.known is False
        return
    sheet = GPU_PEAKS[expected]
    assert (peaks.name, peaks.flops) == (sheet.name, sheet.flops)
    assert peaks.memory_bandwidth_bytes_per_s == sheet.memory_bandwidth_bytes_per_s
    # The host link: the datasheet's, or NVML's negotiated link where plausible.
    if peaks.host_link_negotiated is None:
        assert peaks.host_link_bytes_per_s == sheet.host_link_bytes_per_s
    else:
        share = peaks.host_link_bytes_per_s / sheet.host_link_bytes_per_s
        assert peaks_mod._PLAUSIBLE_LINK_SHARE <= share <= 1


def test_a_readers_gpu_above_its_row_gets_a_flag_not_an_error(monkeypatch):
    # Outside the guide's tests (GPUGUIDE_STRICT_PEAKS unset), a GPU that runs a
    # little above its datasheet row must not stop a page: no share, a flag.
    h100 = GPU_PEAKS["H100 SXM5"]
    monkeypatch.delenv("GPUGUIDE_STRICT_PEAKS", raising=False)
    assert h100.percent_of(70e9, "host_link") is None
    flag = h100.share(70e9, "host_link", peak="the link's peak")
    assert flag == (
        "above the H100 SXM5 figure of 64.0 GB/s for host-link bandwidth: "
        "another clock, power limit, variant or link"
    )
    # Within the tolerance, and below the peak, a share as before.
    assert h100.share(64.5e9, "host_link", peak="the link's peak") == (
        "100% of the link's peak"
    )
    assert h100.share(32e9, "host_link") == "50% of peak"
    # In the guide's tests it is an error again.
    monkeypatch.setenv("GPUGUIDE_STRICT_PEAKS", "1")
    with pytest.raises(ValueError, match=ABOVE):
        h100.share(70e9, "host_link")


@pytest.mark.parametrize(
    ("max_link", "expected", "negotiated"),
    [
        ((5, 16), 64e9, "PCIe gen 5 x16"),
        ((4, 16), 32e9, "PCIe gen 4 x16"),
        ((4, 8), 16e9, "PCIe gen 4 x8"),  # a quarter of gen 5 x16: still plausible
        ((3, 8), 64e9, None),  # an eighth: not a slot an H100 sits in
        ((1, 1), 64e9, None),  # a virtual machine's emulated slot
        ((6, 16), 64e9, None),  # faster than the card itself
        ((None, None), 64e9, None),
    ],
)
def test_a_negotiated_link_counts_only_where_plausible(max_link, expected, negotiated):
    h100 = GPU_PEAKS["H100 SXM5"]
    idle = {"pcie_generation": 1, "pcie_width": 16}  # the link now: never the peak
    top = dict(zip(("pcie_max_generation", "pcie_max_width"), max_link, strict=True))
    state = GpuState(**idle, **top)
    peaks = with_negotiated_link(h100, state)
    assert peaks.host_link_bytes_per_s == expected
    assert peaks.host_link_negotiated == negotiated
    assert peaks.flops == h100.flops
    if negotiated is None:
        assert peaks.datasheet_host_link_bytes_per_s is None
        assert peaks.host_link_for(50e9) == (64e9, "the datasheet link")
    else:
        assert peaks.datasheet_host_link_bytes_per_s == 64e9
        assert peaks.source.endswith(f"host link: {negotiated} as negotiated (NVML)")
    assert with_negotiated_link(h100, None) is h100


def test_a_rate_above_the_negotiated_link_is_held_against_the_datasheets():
    gen4 = with_negotiated_link(
        GPU_PEAKS["H100 SXM5"], GpuState(pcie_max_generation=4, pcie_max_width=16)
    )
    assert gen4.host_link_for() == (32e9, "the negotiated link, PCIe gen 4 x16 (NVML)")
    assert gen4.host_link_for(32.5e9)[0] == 32e9  # within the tolerance
    assert gen4.host_link_for(40e9) == (
        64e9,
        "the datasheet link, as the rate is above NVML's PCIe gen 4 x16",
    )
    assert gen4.percent_of(16e9, "host_link") == pytest.approx(50.0)
    assert gen4.percent_of(48e9, "host_link") == pytest.approx(75.0)
    assert gen4.share(48e9, "host_link") == (
        "75% of peak (the datasheet link, as the rate is above NVML's PCIe gen 4 x16)"
    )
    with pytest.raises(ValueError, match=ABOVE):  # above the datasheet's too
        gen4.percent_of(70e9, "host_link")
    # Other peaks are not touched by the link.
    assert gen4.percent_of(33.5e12, "fp64") == pytest.approx(50.0)


def test_share_of_an_unknown_peak():
    unknown = gpu_peaks("NVIDIA Foo 9000", 200, 200 * GiB)
    assert unknown.share(1e12, torch.bfloat16) == "peak unknown"
    assert unknown.share(1e9, "host_link", peak="the link's peak") == (
        "the link's peak unknown"
    )
