"""NVML's hardware facts (gpuguide.device), with a fake ``pynvml`` module: the GPU
found by its PCI bus id, each query failing on its own, the provenance line, the
host-link peak and the results files; and nothing at all without ``pynvml``."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
import torch
from conftest import CPU_RECORD, CPUINFO_X86, H100_RECORD
from test_results import SCHEMA, _schema_errors

from gpuguide import device as device_mod
from gpuguide import results
from gpuguide.device import GpuState
from gpuguide.peaks import _LANE_BYTES_PER_S, device_peaks
from gpuguide.results import Result
from gpuguide_tools import results_files
from gpuguide_tools.checkup import describe_gpu_state, provenance_line
from gpuguide_tools.results_files import ResultsFile, ResultsFileError

NOW = datetime(2026, 11, 21, 10, 42, tzinfo=timezone.utc)
H100_BUS = "00000000:18:00.0"
OTHER_BUS = "00000000:9A:00.0"


class NVMLError(Exception):
    pass


def fake_pynvml(gpus: dict[str, dict[str, int]], *, event_reasons: bool = True):
    """A stand-in for nvidia-ml-py: ``gpus`` maps a PCI bus id to its answers;
    an answer left out raises NVMLError (not supported), as NVML does."""
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError
    module.NVML_CLOCK_SM, module.NVML_CLOCK_MEM = 1, 2
    module.inits = 0

    def init():
        module.inits += 1

    def answer(key):
        def call(handle, *args):
            gpu = gpus[handle]
            name = key if not args else f"{key}_{'sm' if args[0] == 1 else 'mem'}"
            if name not in gpu:
                raise NVMLError("Not Supported")
            return gpu[name]

        return call

    def handle(bus_id):
        assert isinstance(bus_id, bytes)  # what every pynvml version accepts
        if bus_id.decode() not in gpus:
            raise NVMLError("Not Found")
        return bus_id.decode()

    module.nvmlInit = init
    module.nvmlDeviceGetHandleByPciBusId = handle
    module.nvmlDeviceGetClockInfo = answer("clock")
    module.nvmlDeviceGetMaxClockInfo = answer("max_clock")
    module.nvmlDeviceGetEnforcedPowerLimit = answer("power_mw")
    module.nvmlDeviceGetPowerManagementLimit = answer("management_mw")
    module.nvmlDeviceGetCurrPcieLinkGeneration = answer("gen")
    module.nvmlDeviceGetCurrPcieLinkWidth = answer("width")
    module.nvmlDeviceGetMaxPcieLinkGeneration = answer("max_gen")
    module.nvmlDeviceGetMaxPcieLinkWidth = answer("max_width")
    module.nvmlDeviceGetCurrentClocksThrottleReasons = answer("reasons")
    if event_reasons:  # NVML 12.535 renamed it; older bindings lack the new name
        module.nvmlDeviceGetCurrentClocksEventReasons = answer("reasons")
    return module


H100_ANSWERS = {
    "clock_sm": 1755, "max_clock_sm": 1980, "clock_mem": 2619, "max_clock_mem": 2619,
    "power_mw": 700_000, "gen": 1, "width": 16, "max_gen": 5, "max_width": 16,
    "reasons": 0x1 | 0x4,  # idle (left out) and the software power cap
}  # fmt: skip
OTHER_ANSWERS = {**H100_ANSWERS, "clock_sm": 210, "max_gen": 4, "reasons": 0}


@pytest.fixture
def use_nvml(monkeypatch):
    """Install a fake pynvml (or None: not installed) for one test."""

    def install(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        device_mod._nvml.cache_clear()
        return module

    yield install
    device_mod._nvml.cache_clear()


@pytest.fixture(autouse=True)
def fixed_version(monkeypatch):
    from gpuguide.version import VersionInfo

    version = VersionInfo("0.1.0", commit="abc1234", dirty=False)
    monkeypatch.setattr(device_mod, "describe_version", lambda: version)


def props(bus: int | None = 0x18, *, sms=132, memory=85_045_379_072):
    """torch.cuda.get_device_properties(i) of an H100 at PCI bus ``bus``."""
    ids = {} if bus is None else {"pci_domain_id": 0, "pci_bus_id": bus}
    ids |= {} if bus is None else {"pci_device_id": 0}
    return SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", multi_processor_count=sms, total_memory=memory,
        major=9, minor=0, **ids,
    )  # fmt: skip


def state_at(bus: int) -> GpuState | None:
    """What NVML says about the GPU at PCI bus ``bus``."""
    return device_mod._gpu_state(props(bus))


def cuda_info(p):
    return device_mod._describe_cuda(
        0, p, torch_version="2.13.0", cuda_version="12.8",
        driver_version="570.86.15", cpuinfo_text=CPUINFO_X86,
    )  # fmt: skip


BASE_LINE = (
    "Measured on NVIDIA H100 80GB HBM3 [H100 SXM5] (132 SMs, 79.2 GiB, compute "
    "capability 9.0) | torch 2.13.0 | CUDA 12.8 | driver 570.86.15 | "
)
TAIL = "gpuguide 0.1.0 (abc1234) | 2026-11-21 10:42 UTC"


# -- without pynvml: nothing changes ----------------------------------------------


def test_without_pynvml_the_line_the_peaks_and_the_record_are_as_before(use_nvml):
    use_nvml(None)  # "import pynvml" raises ImportError
    assert device_mod._nvml() is None
    info = cuda_info(props())
    assert info.gpu_state is None
    assert provenance_line(info, now=NOW) == BASE_LINE + TAIL
    assert device_peaks(info).host_link_bytes_per_s == 64e9  # the datasheet's
    record = results.DeviceRecord.from_info(info)
    assert "gpu" not in record.to_json()


def test_nvml_without_a_driver_is_no_nvml(use_nvml):
    module = use_nvml(fake_pynvml({H100_BUS: H100_ANSWERS}))

    def no_driver():
        raise NVMLError("Driver Not Loaded")

    module.nvmlInit = no_driver
    assert device_mod._nvml() is None
    assert state_at(0x18) is None


# -- with pynvml ----------------------------------------------------------------


def test_the_gpu_is_found_by_its_pci_bus_id_not_its_index(use_nvml):
    # NVML lists the other GPU first; torch's device 0 is the one at bus 0x18
    # (CUDA_VISIBLE_DEVICES=1, or CUDA's fastest-first order).
    fake = fake_pynvml({OTHER_BUS: OTHER_ANSWERS, H100_BUS: H100_ANSWERS})
    use_nvml(fake)
    assert cuda_info(props()).gpu_state.sm_clock_mhz == 1755
    assert cuda_info(props(0x9A)).gpu_state.sm_clock_mhz == 210
    assert cuda_info(props(0x3B)).gpu_state is None  # not a GPU NVML knows
    assert cuda_info(props(None)).gpu_state is None  # torch does not say
    assert fake.inits == 1  # NVML started once per process


def test_the_provenance_line_gives_clocks_power_link_and_limiters(use_nvml):
    use_nvml(fake_pynvml({H100_BUS: H100_ANSWERS}))
    line = provenance_line(cuda_info(props()), now=NOW)
    assert line == BASE_LINE + (
        "SM clock 1755 of 1980 MHz, memory clock 2619 of 2619 MHz, power limit "
        "700 W, PCIe gen 1 x16 now (up to gen 5 x16), clocks limited by: software "
        "power cap | " + TAIL
    )


def test_each_query_fails_on_its_own_and_old_bindings_still_give_limiters(use_nvml):
    answers = {k: v for k, v in H100_ANSWERS.items() if k not in ("power_mw", "gen")}
    answers |= {"management_mw": 350_000, "reasons": 0x40 | 0x200}
    use_nvml(fake_pynvml({H100_BUS: answers}, event_reasons=False))
    state = state_at(0x18)
    assert state.power_limit_w == 350.0  # the management limit, when not enforced
    assert state.pcie_generation is None
    assert state.pcie_max_generation == 5
    assert state.clock_limits == ("hardware thermal slowdown", "0x200")
    assert "PCIe gen 5 x16" in describe_gpu_state(state)
    assert "now" not in describe_gpu_state(state)  # the current link is unknown


def test_nothing_limiting_is_an_empty_list_not_an_unknown(use_nvml):
    use_nvml(fake_pynvml({H100_BUS: {**H100_ANSWERS, "reasons": 0x1}}))
    assert state_at(0x18).clock_limits == ()
    assert state_at(0x9A) is None


def test_the_host_link_peak_is_the_negotiated_link(use_nvml):
    # An H100 SXM5 (a gen 5 x16 link on its datasheet) whose slot allows gen 4 x8.
    answers = {**H100_ANSWERS, "max_gen": 4, "max_width": 8}
    use_nvml(fake_pynvml({H100_BUS: answers}))
    peaks = device_peaks(cuda_info(props()))
    assert peaks.host_link_bytes_per_s == 16e9
    assert "PCIe gen 4 x8 as negotiated (NVML)" in peaks.source
    assert peaks.share(12e9, "host_link") == "75% of peak"


# An H100 SXM5's datasheet link is PCIe gen 5 x16: 64 GB/s per direction. What a
# transfer page measures on one: pageable and pinned copies (GB/s).
PAGEABLE, PINNED = 9e9, 54e9


@pytest.mark.parametrize(
    ("max_link", "peak", "negotiated", "source"),
    [
        ((5, 16), 64e9, "PCIe gen 5 x16", "PCIe gen 5 x16 as negotiated (NVML)"),
        ((4, 16), 32e9, "PCIe gen 4 x16", "PCIe gen 4 x16 as negotiated (NVML)"),
        # A virtual machine's emulated slot: no link a GPU runs on.
        ((1, 1), 64e9, None, "NVML's PCIe gen 1 x1 (250 MB/s) is implausibly slow"),
        # No maximum: the link now (gen 1 x16, an idle card's 4 GB/s) is no peak.
        (None, 64e9, None, "NVIDIA H100 Tensor Core GPU datasheet"),
    ],
    ids=["gen5-x16", "gen4-x16", "gen1-x1", "none"],
)
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "reader"])
def test_the_link_peak_falls_back_to_the_datasheet(
    use_nvml, monkeypatch, max_link, peak, negotiated, source, strict
):
    answers = {
        k: v for k, v in H100_ANSWERS.items() if k not in ("max_gen", "max_width")
    }
    if max_link is not None:
        answers |= dict(zip(("max_gen", "max_width"), max_link, strict=True))
    use_nvml(fake_pynvml({H100_BUS: answers}))
    if not strict:  # a reader's run: a rate above a peak is a flag, not an error
        monkeypatch.delenv("GPUGUIDE_STRICT_PEAKS", raising=False)
    peaks = device_peaks(cuda_info(props()))
    assert peaks.host_link_bytes_per_s == peak
    assert peaks.host_link_negotiated == negotiated
    assert source in peaks.source
    # What the transfer pages print: no copy reads above its link, and the line
    # names the link it was held against.
    link, which = peaks.host_link_for(max(PAGEABLE, PINNED))
    assert link == 64e9
    shares = [
        peaks.share(r, "host_link", peak="the link peak") for r in (PAGEABLE, PINNED)
    ]
    assert not any("above" in share.split("(")[0] for share in shares), shares
    if negotiated == "PCIe gen 4 x16":  # the pinned copy beat NVML's link
        assert which == "the datasheet link, as the rate is above NVML's PCIe gen 4 x16"
        assert shares == [
            "28% of the link peak",  # held against gen 4 x16: 9 of 32 GB/s
            "84% of the link peak (the datasheet link, as the rate is above NVML's"
            " PCIe gen 4 x16)",
        ]
    else:
        assert which == (
            "the negotiated link, PCIe gen 5 x16 (NVML)"
            if negotiated
            else "the datasheet link"
        )
        assert shares == ["14% of the link peak", "84% of the link peak"]


def test_a_slower_slot_is_the_peak_while_the_copies_stay_below_it(use_nvml):
    # An H100 in a gen 4 x16 slot really is held against 32 GB/s.
    use_nvml(fake_pynvml({H100_BUS: {**H100_ANSWERS, "max_gen": 4}}))
    peaks = device_peaks(cuda_info(props()))
    assert peaks.host_link_for(26e9) == (
        32e9,
        "the negotiated link, PCIe gen 4 x16 (NVML)",
    )
    assert (
        peaks.share(26e9, "host_link", peak="the link peak") == "81% of the link peak"
    )
    # Above the datasheet's link too: the datasheet row or the timing is wrong.
    with pytest.raises(ValueError, match=r"64\.0 GB/s"):
        peaks.share(70e9, "host_link")


def test_an_unknown_gpu_takes_nvml_link_only_where_plausible(use_nvml, monkeypatch):
    unknown = props(sms=100)  # an H100 name with another SM count: no datasheet row
    for max_link, peak in (((1, 1), None), ((4, 16), 32e9)):
        answers = {**H100_ANSWERS, "max_gen": max_link[0], "max_width": max_link[1]}
        use_nvml(fake_pynvml({H100_BUS: answers}))
        peaks = device_peaks(cuda_info(unknown))
        assert peaks.known is False
        assert peaks.host_link_bytes_per_s == peak
    # Above NVML's link, with no datasheet to turn to: no share, never an error.
    assert peaks.percent_of(54e9, "host_link") is None
    assert peaks.share(54e9, "host_link", peak="the link peak") == (
        "above the unknown GPU (NVIDIA H100 80GB HBM3) figure of 32.0 GB/s for "
        "host-link bandwidth: another clock, power limit, variant or link"
    )


# -- results files ---------------------------------------------------------------

STATE = GpuState(
    sm_clock_mhz=1755, sm_clock_max_mhz=1980, power_limit_w=700.0,
    pcie_generation=5, pcie_width=16, clock_limits=("software power cap",),
)  # fmt: skip


def test_a_record_keeps_the_gpu_state_and_reads_it_back(use_nvml):
    use_nvml(fake_pynvml({H100_BUS: H100_ANSWERS}))
    record = results.DeviceRecord.from_info(cuda_info(props()))
    data = ResultsFile(record, (Result("p", "a", 1.0, "s"),)).to_json()
    assert data["device"]["gpu"]["pcie_max_generation"] == 5
    assert data["device"]["gpu"]["clock_limits"] == ["software power cap"]
    assert _schema_errors(data, SCHEMA) == []
    text = json.dumps(data)
    assert results_files.loads(text).device == record
    assert results_files.dumps(results_files.loads(text)) == results_files.dumps(
        results_files.loads(text)
    )


def test_old_files_without_the_gpu_state_load_and_write_unchanged():
    old = results_files.dumps(ResultsFile(H100_RECORD, (Result("p", "a", 1.0, "s"),)))
    assert '"gpu"' not in old
    assert results_files.dumps(results_files.loads(old)) == old


@pytest.mark.parametrize(
    ("gpu", "problem"),
    [
        ({"sm_clock_mhz": -1}, "/sm_clock_mhz: -1 is less than the minimum of 0"),
        ({"sm_clock_mhz": True}, "/sm_clock_mhz: True is not of type 'integer'"),
        ({"power_limit_w": 0}, "/power_limit_w: 0 is less than or equal to"),
        ({"clock_limits": "power"}, "/clock_limits: 'power' is not of type 'array'"),
        ({"fan_rpm": 3000}, "('fan_rpm' was unexpected)"),
        ([], "/gpu: [] is not of type 'object'"),
    ],
)
def test_a_bad_gpu_state_is_refused_by_name(gpu, problem):
    data = ResultsFile(H100_RECORD).to_json()
    data["device"]["gpu"] = gpu
    with pytest.raises(ResultsFileError, match="gpu") as error:
        results_files.loads(json.dumps(data), "f.json")
    assert problem in str(error.value)
    if isinstance(gpu, dict) and "fan_rpm" in gpu:
        assert _schema_errors(data, SCHEMA) != []  # the schema refuses it too


def test_only_a_cuda_record_has_a_gpu_state():
    with pytest.raises(ValueError, match=r"/gpu: .*in a cuda record only"):
        replace(CPU_RECORD, gpu=STATE)


def test_limiters_seen_at_each_figure_add_up_in_the_file(
    use_nvml, monkeypatch, tmp_path, fresh_results
):
    use_nvml(fake_pynvml({}))  # NVML is there; what it samples is faked below
    target = tmp_path / "h100.json"
    monkeypatch.setenv("GPUGUIDE_RECORD", str(target))
    seen = iter([("hardware slowdown",), (), ("software power cap",)])
    monkeypatch.setattr(
        device_mod,
        "describe_device",
        lambda: SimpleNamespace(gpu_state=GpuState(clock_limits=next(seen))),
    )
    start = replace(H100_RECORD, gpu=replace(STATE, clock_limits=()))
    monkeypatch.setattr(results, "_device", [start])
    monkeypatch.setattr(results, "_default_page", lambda: "page_one")
    results.record("a", 1.0, unit="s")
    results.record("b", 2.0, unit="s")
    assert results_files.load(target).device.gpu.clock_limits == ("hardware slowdown",)
    results.record("c", 3.0, unit="s")
    written = results_files.load(target)
    assert written.device.gpu.clock_limits == (
        "hardware slowdown",
        "software power cap",
    )
    assert written.device.gpu.pcie_generation == 5
    assert len(written.results) == 3


def test_without_nvml_recording_asks_nothing(use_nvml, monkeypatch, fresh_results):
    use_nvml(None)

    def never():
        raise AssertionError("no device description without NVML")

    monkeypatch.setattr(results, "current_device", never)
    monkeypatch.setattr(results, "_default_page", lambda: "p")
    results.record("a", 1.0, unit="s")  # no GPUGUIDE_RECORD: in memory
    assert len(results.recorded()) == 1


def test_the_check_up_keeps_the_state_after_its_run(use_nvml, monkeypatch):
    from gpuguide_tools import checkup

    use_nvml(fake_pynvml({H100_BUS: H100_ANSWERS}))
    start = cuda_info(props())  # at the start: clocks limited by the power cap
    after = replace(STATE, sm_clock_mhz=1980, clock_limits=("hardware slowdown",))
    infos = iter([start, replace(start, gpu_state=after)])  # before and after
    monkeypatch.setattr(checkup, "describe_device", lambda device: next(infos))
    for name in ("matmul", "memory", "transfer", "launch"):
        monkeypatch.setattr(checkup, f"{name}_figures", lambda *a, **k: [])
    gpu = checkup.checkup(torch.device("cpu")).device.gpu
    assert gpu.sm_clock_mhz == 1980  # sampled after the measurements
    assert gpu.clock_limits == ("software power cap", "hardware slowdown")


# -- on a real GPU with nvidia-ml-py -----------------------------------------------


@pytest.mark.gpu
def test_nvml_describes_the_gpu_torch_uses(use_nvml):
    pynvml = pytest.importorskip("pynvml")
    use_nvml(pynvml)
    if device_mod._nvml() is None:
        pytest.skip("NVML does not start here")
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    ids = [
        getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")
    ]
    assert None not in ids, "this torch does not give the PCI bus id"
    bus_id = "{:08X}:{:02X}:{:02X}.0".format(*ids)
    handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
    name = pynvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else name
    assert name == torch.cuda.get_device_name(index)  # the same card
    state = device_mod.describe_device(torch.device("cuda", index)).gpu_state
    assert state is not None
    assert state.sm_clock_max_mhz
    assert state.sm_clock_max_mhz >= (state.sm_clock_mhz or 0)
    assert state.clock_limits is not None
    line = provenance_line(torch.device("cuda", index))
    assert f"of {state.sm_clock_max_mhz} MHz" in line
    # A virtual machine may show no link, or an emulated one (gen 1 x1): the link's
    # peak is then the datasheet's, never a link below what the copies reach.
    assert ("PCIe gen" in line) == (state.link_label is not None)
    peaks = device_peaks(torch.device("cuda", index))
    if peaks.host_link_negotiated is not None:
        assert peaks.host_link_negotiated in line
        lane = _LANE_BYTES_PER_S[state.pcie_max_generation]
        assert peaks.host_link_bytes_per_s == lane * state.pcie_max_width
    else:  # the datasheet's link (None for a GPU without a row)
        info = device_mod.describe_device(torch.device("cuda", index))
        sheet = device_peaks(replace(info, gpu_state=None))
        assert peaks.host_link_bytes_per_s == sheet.host_link_bytes_per_s
