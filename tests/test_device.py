"""Tests for gpuguide.device: fake GPU properties, sample /proc texts, fixed clocks."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import torch
from conftest import CPUINFO_X86

from gpuguide import device as device_mod
from gpuguide import host
from gpuguide.device import DeviceInfo, describe_device, pick_device
from gpuguide.version import VersionInfo
from gpuguide_tools.checkup import provenance_line as provenance

NOW = datetime(2026, 11, 21, 10, 42, 37, tzinfo=timezone.utc)
#: The helpers' version every description here names (the real one depends on
#: the checkout's state).
VERSION = VersionInfo("0.1.0", commit="abc1234", dirty=False)


@pytest.fixture(autouse=True)
def fixed_version(monkeypatch):
    monkeypatch.setattr(device_mod, "describe_version", lambda: VERSION)


def props(name: str, sms: int, memory: int, major: int = 9, minor: int = 0):
    """A stand-in for torch.cuda.get_device_properties(i)."""
    return SimpleNamespace(
        name=name,
        multi_processor_count=sms,
        total_memory=memory,
        major=major,
        minor=minor,
    )


H100 = props("NVIDIA H100 80GB HBM3", 132, 85_045_379_072)


def cuda_info(p=H100, *, cuda="12.8", driver="570.86.15") -> DeviceInfo:
    return device_mod._describe_cuda(
        0,
        p,
        torch_version="2.13.0",
        cuda_version=cuda,
        driver_version=driver,
        cpuinfo_text=CPUINFO_X86,
    )


def cpu_info(**changes) -> DeviceInfo:
    info = device_mod._describe_host("cpu", CPUINFO_X86)
    fields = {
        "torch_version": "2.13.0+cpu",
        "cuda_version": None,
        "cpu_threads": 2,
        "torch_threads": 2,
        "cpu_isa": "AVX-512 BF16",
    }
    fields.update(changes)
    return dataclasses.replace(info, **fields)


@pytest.fixture
def no_accelerator(monkeypatch):
    """A machine with neither CUDA nor MPS, and no GPUGUIDE_DEVICE."""
    monkeypatch.delenv("GPUGUIDE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "_mps_available", lambda: False)


def _index(d) -> int:
    return d.index if isinstance(d, torch.device) else d


@pytest.fixture
def fake_cuda(monkeypatch):
    """Two fake CUDA devices (an H100 and an unknown GPU), current device 0.

    No GPU memory cap is set, and none was applied before the test.
    """
    monkeypatch.delenv("GPUGUIDE_DEVICE", raising=False)
    monkeypatch.delenv("GPUGUIDE_GPU_MEMORY", raising=False)
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)
    monkeypatch.setattr(device_mod, "_applied_caps", {})
    devices = [H100, props("NVIDIA Foo 9000", 99, 10 * 2**30, 12, 1)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: devices[_index(d)]
    )
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(host, "driver_version", lambda: "570.86.15")
    return devices


@pytest.fixture
def allocator(monkeypatch, fake_cuda):
    """The fake GPUs' memory (all free) and the fractions set on their allocators."""
    fractions: list[tuple[float, int]] = []
    monkeypatch.setattr(
        torch.cuda,
        "mem_get_info",
        lambda d: (fake_cuda[_index(d)].total_memory,) * 2,
    )
    monkeypatch.setattr(
        torch.cuda,
        "set_per_process_memory_fraction",
        lambda fraction, d: fractions.append((fraction, _index(d))),
    )
    return fractions


# --------------------------------------------------------------------------------------
# pick_device
# --------------------------------------------------------------------------------------


def test_pick_device_falls_back_to_cpu(no_accelerator):
    assert pick_device() == torch.device("cpu")


def test_pick_device_prefers_cuda_then_mps(monkeypatch, fake_cuda):
    assert pick_device() == torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "_mps_available", lambda: True)
    assert pick_device() == torch.device("mps")


def test_pick_device_prefer_wins_over_env_and_cuda(monkeypatch, fake_cuda):
    monkeypatch.setenv("GPUGUIDE_DEVICE", "cuda:1")
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device(torch.device("cpu")) == torch.device("cpu")
    assert pick_device() == torch.device("cuda", 1)


def test_pick_device_env_var(monkeypatch, no_accelerator):
    monkeypatch.setenv("GPUGUIDE_DEVICE", " cpu ")
    assert pick_device() == torch.device("cpu")
    monkeypatch.setenv("GPUGUIDE_DEVICE", "")  # empty means unset
    assert pick_device() == torch.device("cpu")


def test_pick_device_cuda_without_index_gets_current(monkeypatch, fake_cuda):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert pick_device("cuda") == torch.device("cuda", 1)


@pytest.mark.parametrize("choice", ["cuda", "cuda:0", torch.device("cuda")])
def test_pick_device_unavailable_cuda_raises(no_accelerator, choice):
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        pick_device(choice)


def test_pick_device_unavailable_from_env_raises(monkeypatch, no_accelerator):
    monkeypatch.setenv("GPUGUIDE_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="GPUGUIDE_DEVICE"):
        pick_device()


def test_pick_device_bad_cuda_index_raises(fake_cuda):
    with pytest.raises(RuntimeError, match="only 2 CUDA device"):
        pick_device("cuda:5")


def test_pick_device_unavailable_mps_raises(no_accelerator):
    with pytest.raises(RuntimeError, match="MPS backend is not available"):
        pick_device("mps")


@pytest.mark.parametrize("choice", ["banana", "meta"])
def test_pick_device_rejects_unknown_devices(no_accelerator, choice):
    with pytest.raises(ValueError, match="device"):
        pick_device(choice)


# --------------------------------------------------------------------------------------
# GPUGUIDE_GPU_MEMORY: the allocator's limit
# --------------------------------------------------------------------------------------

GiB = 2**30


def test_cap_sets_the_allocator_fraction_once_per_device(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GiB")
    assert pick_device() == torch.device("cuda", 0)
    assert allocator == [(16 * GiB / H100.total_memory, 0)]
    pick_device()
    pick_device("cuda:0")
    describe_device()
    assert len(allocator) == 1  # once per device


def test_cap_is_checked_against_each_gpu(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "8GiB")
    pick_device("cuda:0")
    pick_device("cuda:1")
    assert allocator == [(8 * GiB / H100.total_memory, 0), (8 / 10, 1)]


def test_cap_larger_than_the_gpu_stops_with_names_and_sizes(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "100GiB")
    with pytest.raises(ValueError, match="GPUGUIDE_GPU_MEMORY") as error:
        pick_device()
    message = str(error.value)
    assert "100 GiB" in message  # the cap
    assert "79.2 GiB" in message  # the GPU's memory
    assert "NVIDIA H100 80GB HBM3" in message
    assert allocator == []


def test_cap_equal_to_the_gpu_is_allowed(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", str(H100.total_memory))
    pick_device()
    assert allocator == [(1.0, 0)]


def test_cap_that_is_not_a_size_stops_pick_device(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "lots")
    with pytest.raises(ValueError, match=r"GPUGUIDE_GPU_MEMORY.*'lots'"):
        pick_device()


def test_no_cap_touches_no_allocator(monkeypatch, fake_cuda):
    def fail(*args):
        raise AssertionError("no CUDA memory call without a cap")

    monkeypatch.setattr(torch.cuda, "mem_get_info", fail)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", fail)
    assert pick_device() == torch.device("cuda", 0)
    assert device_mod.apply_memory_cap("cuda:1") is None
    assert describe_device().memory_cap_bytes is None


def test_cap_follows_the_variable_when_it_changes(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GiB")
    pick_device()
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "8GiB")
    pick_device()
    monkeypatch.delenv("GPUGUIDE_GPU_MEMORY")
    pick_device()  # uncapped again: the whole GPU
    total = H100.total_memory
    assert allocator == [(16 * GiB / total, 0), (8 * GiB / total, 0), (1.0, 0)]


def test_small_mode_caps_the_allocator_unless_the_variable_says_otherwise(
    monkeypatch, allocator
):
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    total = H100.total_memory
    assert device_mod.apply_memory_cap("cuda:0") == 8 * GiB
    assert describe_device().memory_cap_bytes == 8 * GiB
    # A GPU smaller than the default is capped at its own memory, no error.
    small_gpu = props("NVIDIA Tiny", 20, 6 * GiB, 8, 6)
    fake_cuda_devices = [H100, small_gpu]
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: fake_cuda_devices[_index(d)]
    )
    monkeypatch.setattr(
        torch.cuda,
        "mem_get_info",
        lambda d: (fake_cuda_devices[_index(d)].total_memory,) * 2,
    )
    assert device_mod.apply_memory_cap("cuda:1") == 6 * GiB
    # The variable wins in small mode too.
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "2GiB")
    assert device_mod.apply_memory_cap("cuda:0") == 2 * GiB
    assert allocator == [(8 * GiB / total, 0), (1.0, 1), (2 * GiB / total, 0)]


def test_cpu_and_mps_ignore_the_cap(monkeypatch, no_accelerator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "not even a size")
    assert pick_device() == torch.device("cpu")
    assert device_mod.apply_memory_cap("cpu") is None
    assert device_mod.apply_memory_cap("mps") is None
    assert describe_device().memory_cap_bytes is None
    assert "capped" not in provenance(now=NOW)


def test_describe_device_and_provenance_show_the_cap(monkeypatch, allocator):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16 GiB")
    info = describe_device()
    assert info.memory_cap_bytes == 16 * GiB
    line = provenance(info, now=NOW)
    assert line.endswith(
        "| driver 570.86.15 | GPU memory capped at 16.0 GiB | gpuguide 0.1.0 "
        "(abc1234) | 2026-11-21 10:42 UTC"
    )
    assert allocator == [(16 * GiB / H100.total_memory, 0)]


def test_mps_available_matches_torch():
    expected = bool(torch.backends.mps.is_available())
    assert device_mod._mps_available() is expected


# --------------------------------------------------------------------------------------
# describe_device and DeviceInfo
# --------------------------------------------------------------------------------------

GPUS = [
    # (name, SMs, total_memory as torch reports it, major, minor, variant)
    ("NVIDIA H100 80GB HBM3", 132, 85_045_379_072, 9, 0, "H100 SXM5"),
    ("NVIDIA H200", 132, 150_021_488_640, 9, 0, "H200 SXM"),
    ("NVIDIA H100 PCIe", 114, 85_031_714_816, 9, 0, "H100 PCIe"),
    ("NVIDIA H100 NVL", 132, 100_485_038_080, 9, 0, "H100 NVL"),
    ("NVIDIA A100-SXM4-80GB", 108, 85_198_045_184, 8, 0, "A100 SXM4 80GB"),
    ("NVIDIA A100-SXM4-40GB", 108, 42_505_273_344, 8, 0, "A100 SXM4 40GB"),
    ("NVIDIA A100-PCIE-40GB", 108, 42_314_694_656, 8, 0, "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", 108, 85_100_068_864, 8, 0, "A100 PCIe 80GB"),
    ("NVIDIA A10G", 80, 23_609_475_072, 8, 6, "A10G"),
    ("NVIDIA L4", 58, 23_580_639_232, 8, 9, "L4"),
    ("Tesla T4", 40, 15_835_660_288, 7, 5, "T4"),
    ("NVIDIA GeForce RTX 4090", 128, 25_393_692_672, 8, 9, "RTX 4090"),
    ("NVIDIA Foo 9000", 200, 200 * 2**30, 12, 0, None),
]


@pytest.mark.parametrize(("name", "sms", "memory", "major", "minor", "variant"), GPUS)
def test_describe_cuda_from_properties(name, sms, memory, major, minor, variant):
    info = cuda_info(props(name, sms, memory, major, minor))
    assert info.type == "cuda"
    assert info.name == name
    assert info.variant == variant
    assert info.index == 0
    assert info.sm_count == sms
    assert info.total_memory_bytes == memory
    assert info.compute_capability == (major, minor)
    assert (info.torch_version, info.cuda_version, info.driver_version) == (
        "2.13.0",
        "12.8",
        "570.86.15",
    )
    assert info.cpu_cores == 4
    assert info.short_name == (variant or name)


def test_device_info_is_frozen():
    info = cuda_info()
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.name = "other"  # type: ignore[misc]


def test_describe_device_cpu(no_accelerator):
    info = describe_device()
    assert info.type == "cpu"
    assert info.variant is None
    assert info.sm_count is info.total_memory_bytes is info.compute_capability is None
    assert info.name == info.cpu_model
    assert info.torch_version == torch.__version__
    assert info.cuda_version == torch.version.cuda
    assert info.cpu_threads >= 1
    assert info.torch_threads == torch.get_num_threads()
    assert info.cpu_cores is None or info.cpu_cores >= 1
    threads = "1 thread" if info.cpu_threads == 1 else f"{info.cpu_threads} threads"
    isa = f", {info.cpu_isa}" if info.cpu_isa else ""
    assert info.short_name == f"CPU: {info.cpu_model}, {threads}{isa}"
    assert (info.gpuguide_commit, info.gpuguide_dirty) == ("abc1234", False)


def test_describe_device_cuda_uses_device_properties(fake_cuda):
    info = describe_device("cuda:0")
    assert (info.name, info.variant, info.sm_count) == (
        "NVIDIA H100 80GB HBM3",
        "H100 SXM5",
        132,
    )
    assert info.driver_version == "570.86.15"
    assert info.cuda_version == "12.8"
    other = describe_device("cuda:1")
    assert other.index == 1
    assert other.variant is None
    assert other.compute_capability == (12, 1)


def test_describe_device_mps(monkeypatch, no_accelerator):
    monkeypatch.setattr(device_mod, "_mps_available", lambda: True)
    info = describe_device("mps")
    assert info.type == "mps"
    assert info.name.endswith("GPU (MPS)")
    assert info.short_name == info.name
    apple = device_mod._describe_host(
        "mps", "processor\t: 0\nmodel name\t: Apple M2 Pro\n"
    )
    assert apple.name == "Apple M2 Pro GPU (MPS)"


# --------------------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------------------


def test_provenance_cuda_line():
    line = provenance(cuda_info(), now=NOW)
    assert line == (
        "Measured on NVIDIA H100 80GB HBM3 [H100 SXM5] (132 SMs, 79.2 GiB, compute "
        "capability 9.0) | torch 2.13.0 | CUDA 12.8 | driver 570.86.15 | "
        "gpuguide 0.1.0 (abc1234) | 2026-11-21 10:42 UTC"
    )


def test_provenance_unknown_gpu_and_missing_versions():
    info = cuda_info(
        props("NVIDIA Foo 9000", 200, 3 * 2**30, 12, 0), cuda=None, driver=None
    )
    line = provenance(info, now=NOW)
    assert line.startswith("Measured on NVIDIA Foo 9000 (200 SMs, 3.00 GiB, ")
    assert "[" not in line
    assert "| CUDA: unknown | driver unknown |" in line


def test_provenance_cpu_lines():
    assert provenance(cpu_info(), now=NOW) == (
        "Measured on CPU Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (4 cores, 2 "
        "threads, AVX-512 BF16; torch uses 2 threads) | torch 2.13.0+cpu | CUDA: "
        "none (CPU-only run) | gpuguide 0.1.0 (abc1234) | 2026-11-21 10:42 UTC"
    )
    line = provenance(
        cpu_info(cuda_version="12.8", cpu_cores=None, torch_threads=1), now=NOW
    )
    assert "(2 threads, AVX-512 BF16; torch uses 1 thread)" in line
    assert "| CUDA 12.8 build, not used |" in line


@pytest.mark.parametrize(
    ("commit", "dirty", "shown"),
    [
        ("f4b16f4", False, "| gpuguide 0.1.0 (f4b16f4) |"),
        ("f4b16f4", True, "| gpuguide 0.1.0 (f4b16f4+dirty) |"),
        (None, False, "| gpuguide 0.1.0 (commit unknown) |"),
    ],
)
def test_provenance_names_the_helpers_version_and_commit(commit, dirty, shown):
    for info in (cpu_info(), cuda_info()):
        changed = dataclasses.replace(
            info, gpuguide_commit=commit, gpuguide_dirty=dirty
        )
        line = provenance(changed, now=NOW)
        assert shown in line
        assert line.endswith(f"{shown} 2026-11-21 10:42 UTC")


def test_cpu_identity_names_its_vector_isa():
    # In a VM the model can be just "AMD EPYC": the ISA tells two such CPUs apart.
    epyc = cpu_info(cpu_model="AMD EPYC", name="AMD EPYC")
    assert epyc.short_name == "CPU: AMD EPYC, 2 threads, AVX-512 BF16"
    assert dataclasses.replace(epyc, cpu_isa="AVX2").short_name == (
        "CPU: AMD EPYC, 2 threads, AVX2"
    )
    unknown = dataclasses.replace(epyc, cpu_isa=None)
    assert unknown.short_name == "CPU: AMD EPYC, 2 threads"
    assert "(4 cores, 2 threads; torch uses" in provenance(unknown, now=NOW)
    # A GPU's label is the GPU: the host's ISA does not decide its speed.
    assert cuda_info().short_name == "H100 SXM5"
    assert "AVX" not in provenance(cuda_info(), now=NOW)


def test_cpu_isa_from_cpuinfo_flags_else_torch(monkeypatch):
    flags = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx avx2 avx512f\n"
    assert device_mod._describe_host("cpu", flags).cpu_isa == "AVX-512"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert device_mod._describe_host("cpu", CPUINFO_X86).cpu_isa == "AVX-512"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert device_mod._describe_host("cpu", "").cpu_isa == "AVX2"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    monkeypatch.setattr(device_mod.platform, "machine", lambda: "x86_64")
    assert device_mod._describe_host("cpu", "").cpu_isa is None
    monkeypatch.setattr(device_mod.platform, "machine", lambda: "arm64")
    assert device_mod._describe_host("cpu", "").cpu_isa == "NEON"


def test_provenance_mps_line():
    info = dataclasses.replace(
        cpu_info(cpu_isa="NEON BF16"), type="mps", name="Apple M2 GPU (MPS)"
    )
    line = provenance(info, now=NOW)
    assert line.startswith(
        "Measured on Apple M2 GPU (MPS) (host CPU: 4 cores, 2 threads, NEON BF16;"
    )
    assert "CUDA: none (MPS run)" in line


def test_provenance_converts_time_to_utc():
    paris = timezone(timedelta(hours=1))
    local = datetime(2026, 11, 21, 11, 42, tzinfo=paris)
    assert provenance(cpu_info(), now=local).endswith("| 2026-11-21 10:42 UTC")
    naive = datetime(2026, 1, 2, 3, 4)
    assert provenance(cpu_info(), now=naive).endswith("| 2026-01-02 03:04 UTC")


def test_provenance_default_is_current_cpu_and_time(no_accelerator):
    before = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    line = provenance()
    after = datetime.now(timezone.utc)
    assert line.startswith("Measured on CPU ")
    assert "\n" not in line
    assert f"| torch {torch.__version__} |" in line
    stamp = datetime.strptime(line.rsplit("| ", 1)[1], "%Y-%m-%d %H:%M UTC")
    assert before <= stamp.replace(tzinfo=timezone.utc) <= after


def test_provenance_is_one_line_even_with_odd_names():
    info = cuda_info(props("NVIDIA\nWeird   GPU", 1, 2**30))
    line = provenance(info, now=NOW)
    assert "\n" not in line
    assert line.startswith("Measured on NVIDIA Weird GPU (1 SM, ")


@pytest.mark.gpu
def test_describe_real_cuda_device():
    info = describe_device("cuda")
    props_ = torch.cuda.get_device_properties(info.index)
    assert info.name == props_.name
    assert info.sm_count == props_.multi_processor_count
    line = provenance("cuda")
    assert line.startswith(f"Measured on {info.name}")
    assert f"CUDA {torch.version.cuda}" in line


@pytest.mark.gpu
def test_cap_limits_the_real_allocator(monkeypatch):
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "1GiB")
    device = pick_device("cuda")
    try:
        torch.cuda.empty_cache()
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(2 * GiB, dtype=torch.uint8, device=device)
        assert "GPU memory capped at 1.00 GiB" in provenance(device)
    finally:
        monkeypatch.delenv("GPUGUIDE_GPU_MEMORY")
        device_mod.apply_memory_cap(device)  # the whole GPU again
    torch.empty(2 * GiB, dtype=torch.uint8, device=device)  # fits again
