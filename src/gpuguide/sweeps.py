"""A size sweep that measures, prints and plots itself.

A page declares its workload once, the sizes and the variants; :meth:`Sweep.run`
times every variant at the sizes its device can afford and returns a
:class:`SweepResult`, which prints a table, draws itself and reports its figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import takewhile
from typing import Any

import torch

from gpuguide.device import as_device, pick_device
from gpuguide.page import report as report_figure
from gpuguide.peaks import device_peaks
from gpuguide.plotting import plot_sweep
from gpuguide.sizes import sweep as fitting_sizes
from gpuguide.tables import Table
from gpuguide.timing import Measurement, Rate, benchmark
from gpuguide.units import format_value, unit_scale
from gpuguide.verdicts import Comparison, compare, interleave

__all__ = ["Sweep", "SweepResult", "Variant"]


def _size_text(n: int) -> str:
    """``"2^20"`` for a power of two from 2^14 on, else the digits (``"8192"``)."""
    if n >= 2**14 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


@dataclass(frozen=True)
class Variant:
    """One way to run the workload: ``fn(*inputs)`` on ``device`` (default the
    page's), inputs made on ``inputs_on`` by ``inputs(n, device)`` (default the
    sweep's), at the sizes that fit ``call_s`` and ``memory(n)``, planned at
    ``flop_per_s``, where variant ``within`` ran; at size ``size(n)`` for the
    sweep's ``n``; ``peak`` names its rate's peak (False: none, True: the sweep's)."""

    fn: Callable[..., Any]
    device: torch.device | str | None = None
    inputs_on: torch.device | str | None = None
    call_s: float | None = None
    within: str | None = None
    peak: bool | str = True
    inputs: Callable[[int, torch.device], Sequence[Any]] | None = None
    size: Callable[[int], int] | None = None
    flop_per_s: float | None = None
    memory: Callable[[int], float] | None = None


@dataclass(frozen=True)
class Sweep:
    """A workload over sizes ``lo`` to ``hi`` (``per_octave`` per doubling, each a
    multiple of ``multiple_of``) that fit the device, or over the listed ``sizes``.

    ``inputs(n, device)`` makes one size's arguments outside the timed region;
    ``memory(n)`` is the bytes they take (default ``traffic(n)``), ``flop(n)`` and
    ``traffic(n)`` the FLOP and bytes one call computes and moves. ``rate``
    ("FLOP/s" or "B/s") prints rates instead of times, as a share of the device's
    ``peak`` ("fp32", "memory", "host_link"...)."""

    name: str
    inputs: Callable[[int, torch.device], Sequence[Any]]
    lo: int = 1
    hi: int = 1
    memory: Callable[[int], float] | None = None
    flop: Callable[[int], float] | None = None
    traffic: Callable[[int], float] | None = None
    rate: str | None = None
    peak: str | None = None
    per_octave: int = 1
    multiple_of: int = 1
    size_label: str = "size n (elements)"
    sizes: Sequence[int] | None = None

    def __post_init__(self) -> None:
        if self.sizes is not None and not self.sizes:
            msg = "sizes must list at least one size, got none"
            raise ValueError(msg)
        if self.sizes is None and self.memory is None and self.traffic is None:
            msg = "give memory(n), the bytes one size takes, or traffic(n)"
            raise ValueError(msg)
        if self.rate not in (None, "FLOP/s", "B/s"):
            msg = f"rate must be one of 'FLOP/s', 'B/s' or None, got {self.rate!r}"
            raise ValueError(msg)
        need = "flop" if self.rate == "FLOP/s" else "traffic"
        if self.rate is not None and getattr(self, need) is None:
            msg = f"rate={self.rate!r} needs {need}(n), the work of one call"
            raise ValueError(msg)

    def _peak(self, v: Variant | None) -> str | None:
        peak = True if v is None else v.peak
        return peak if isinstance(peak, str) else (self.peak if peak else None)

    def _peak_rate(self, device: torch.device, v: Variant) -> float | None:
        peak = self._peak(v)
        if self.rate != "FLOP/s" or not peak:
            return None
        return device_peaks(device).flops.get(peak)

    def _sizes(self, device: torch.device, v: Variant) -> list[int]:
        if self.sizes is not None:
            return sorted(self.sizes)
        return fitting_sizes(
            self.lo,
            self.hi,
            memory_at=v.memory or self.memory or self.traffic,  # type: ignore[arg-type]
            flop_at=self.flop,
            traffic_at=self.traffic,
            device=device,
            call_s=v.call_s,
            flop_per_s=v.flop_per_s or self._peak_rate(device, v),
            per_octave=self.per_octave,
            multiple_of=self.multiple_of,
        )

    def run(
        self,
        variants: Mapping[str, Variant | Callable[..., Any]],
        *,
        paired: bool = False,
        **timing: Any,
    ) -> SweepResult:
        """Time every variant at each of its sizes; ``paired`` interleaves the
        variants that share a device and inputs (:func:`gpuguide.interleave`);
        ``timing`` goes to :func:`gpuguide.benchmark`."""
        if not variants:
            msg = "variants must name at least one way to run the workload"
            raise ValueError(msg)
        plans = {
            label: v if isinstance(v, Variant) else Variant(v)
            for label, v in variants.items()
        }
        devices = {
            label: as_device(v.device or pick_device()) for label, v in plans.items()
        }
        own_sizes: dict[str, list[int]] = {}
        for label, v in plans.items():
            if v.within is not None and v.within not in plans:
                msg = f"variant {label!r}: within={v.within!r} names no variant"
                raise ValueError(msg)
            own_sizes[label] = self._sizes(devices[label], v)
        for label, v in plans.items():
            if v.within is not None:
                inside = own_sizes[v.within]
                own_sizes[label] = [n for n in own_sizes[label] if n in inside]
        sizes = sorted({n for ns in own_sizes.values() for n in ns})
        times: dict[str, list[Measurement | None]] = {label: [] for label in plans}
        out_of_memory: dict[str, int] = {}
        for n in sizes:
            groups: dict[tuple[str, str], dict[str, Callable[[], Any]]] = {}
            made: dict[tuple[Any, ...], Sequence[Any]] = {}
            for label, v in plans.items():
                if n not in own_sizes[label] or label in out_of_memory:
                    continue
                where = as_device(v.inputs_on or devices[label])
                key = (v.inputs or self.inputs, str(where), v.size(n) if v.size else n)
                try:
                    if key not in made:
                        made[key] = key[0](key[2], where)
                except torch.OutOfMemoryError:
                    out_of_memory[label] = n
                    torch.cuda.empty_cache()  # a no-op without CUDA
                    continue
                group = (str(devices[label]), str(where)) if paired else (label, "")
                groups.setdefault(group, {})[label] = partial(v.fn, *made[key])
            timed: dict[str, Measurement] = {}
            for calls in groups.values():
                dev = devices[next(iter(calls))]
                try:  # unpaired, every group is one variant
                    if len(calls) > 1:
                        timed.update(interleave(calls, device=dev, **timing))
                    else:
                        for label, call in calls.items():
                            timed[label] = benchmark(
                                call, label=label, device=dev, **timing
                            )
                except torch.OutOfMemoryError:
                    out_of_memory.update(dict.fromkeys(calls, n))
                    torch.cuda.empty_cache()  # a no-op without CUDA
            for label in plans:
                times[label].append(timed.get(label))
            del made, groups
        for label, n in out_of_memory.items():
            what = f"{self.name}, {label}: out of memory at n={_size_text(n)}"
            print(f"{what}; larger sizes skipped")
        devices_text = {label: str(d) for label, d in devices.items()}
        return SweepResult(self, sizes, times, devices_text, plans)


@dataclass
class SweepResult:
    """What :meth:`Sweep.run` measured: ``times[label][i]`` at ``sizes[i]``
    (None where that variant did not run). Printing it gives the table."""

    sweep: Sweep
    sizes: list[int]
    times: dict[str, list[Measurement | None]]
    devices: dict[str, str]
    variants: dict[str, Variant] = field(default_factory=dict)

    def _size_of(self, label: str, n: int) -> int:
        v = self.variants.get(label)
        return v.size(n) if v and v.size else n

    def _peak(self, label: str) -> str | None:
        return self.sweep._peak(self.variants.get(label))

    def _work(self) -> tuple[Callable[[int], float], str]:
        unit = self.sweep.rate or ("B/s" if self.sweep.traffic else "FLOP/s")
        work = self.sweep.flop if unit == "FLOP/s" else self.sweep.traffic
        if work is None:
            msg = f"sweep {self.sweep.name!r} declares no flop(n) or traffic(n)"
            raise ValueError(msg)
        return work, unit

    def ran(self, *labels: str) -> list[int]:
        """The sizes at which every one of ``labels`` ran, ascending."""
        for label in labels:
            if label not in self.times:
                msg = f"no variant {label!r}; this sweep ran {list(self.times)}"
                raise KeyError(msg)
        return [
            n
            for i, n in enumerate(self.sizes)
            if all(self.times[label][i] is not None for label in labels)
        ]

    def largest(self, *labels: str) -> int:
        """The largest size at which all ``labels`` ran; ``ValueError`` if none."""
        both = self.ran(*labels)
        if not both:
            msg = f"{' and '.join(map(repr, labels))} never ran at the same size"
            raise ValueError(msg)
        return both[-1]

    def at(self, label: str, n: int | None = None) -> Measurement:
        """``label``'s measurement at size ``n`` (default its largest)."""
        n = self.largest(label) if n is None else n
        if n not in self.ran(label):
            msg = f"{label!r} did not run at n={n}; it ran at {self.ran(label)}"
            raise ValueError(msg)
        found = self.times[label][self.sizes.index(n)]
        assert found is not None
        return found

    def rate(self, label: str, n: int | None = None) -> Rate:
        """``label``'s rate at size ``n`` (default its largest)."""
        work, unit = self._work()
        n = self.largest(label) if n is None else n
        return self.at(label, n).rate(work(self._size_of(label, n)), unit)

    def compare(self, subject: str, baseline: str, n: int | None = None) -> Comparison:
        """``subject`` against ``baseline`` at ``n`` (default the largest both ran)."""
        n = self.largest(subject, baseline) if n is None else n
        return compare(self.at(subject, n), self.at(baseline, n))

    def per_work(self, labels: Sequence[str], n: int | None = None) -> Measurement:
        """Seconds per FLOP (else byte) of ``labels`` at ``n`` (default the largest
        all ran), pooled: per paired round the mean over ``labels``."""
        work, unit = self._work()
        n = self.largest(*labels) if n is None else n
        timed = [(self.at(label, n), work(self._size_of(label, n))) for label in labels]
        rounds = tuple(
            sum(m.rounds[r] / w for m, w in timed) / len(timed)
            for r in range(min(len(m.rounds) for m, _ in timed))
        )
        calls = rounds or tuple(t / w for m, w in timed for t in m.times_s)
        per = "FLOP" if unit == "FLOP/s" else "byte"
        label = f"{', '.join(labels)} at n={_size_text(n)}, per {per}"
        device, method = timed[0][0].device, f"{timed[0][0].method} per {per}"
        return Measurement(label, calls, device, method, rounds=rounds)

    def verdicts(self, subject: str, baseline: str) -> list[tuple[int, Comparison]]:
        """``(n, comparison)`` at every size both ran, ascending."""
        both = self.ran(subject, baseline)
        return [(n, self.compare(subject, baseline, n)) for n in both]

    def crossover(self, subject: str, baseline: str) -> int | None:
        """The smallest size from which ``subject`` was faster than ``baseline`` at
        every size both ran; None if it was not faster at the largest."""
        ends = reversed(self.verdicts(subject, baseline))
        won = [n for n, v in takewhile(lambda nv: nv[1].verdict == "faster", ends)]
        return won[-1] if won else None

    def report(
        self, label: str | None = None, n: int | None = None, **config: Any
    ) -> None:
        """Print and record a variant's (default: every variant's) rate or time at
        ``n`` (default its largest)."""
        if label is None:
            for each in self.times:
                self.report(each, n, **config)
            return
        n = self.largest(label) if n is None else n
        name, size = f"{self.sweep.name}, {label}", self._size_of(label, n)
        if self.sweep.rate is None:
            report_figure(name, self.at(label, n), size=size, **config)
        else:
            config["peak"] = self._peak(label)
            report_figure(name, self.rate(label, n), size=size, **config)

    def against(self, baseline: str) -> None:
        """Print from which size on each variant beat ``baseline``, and report its
        speed-up at the largest size both ran."""
        for label in self.times:
            if label == baseline or not self.ran(label, baseline):
                continue
            found = self.crossover(label, baseline)
            where = f"from n={_size_text(found)} on" if found else "at no measured size"
            print(f"{self.sweep.name}, {label}: faster than {baseline} {where}")
            report_figure(
                f"{self.sweep.name} speed-up, {label}",
                self.compare(label, baseline),
                size=self.largest(label, baseline),
            )

    def _cell(self, label: str, n: int) -> str:
        m = self.times[label][self.sizes.index(n)]
        if m is None or self.sweep.rate is None:
            return "-" if m is None else str(m)
        rate = self.rate(label, n)
        text = format_value(rate.value, rate.unit) + (" NOISY" if m.is_noisy else "")
        if peak := self._peak(label):
            share = device_peaks(self.devices[label]).percent_of(rate.value, peak)
            text += f" ({share:.0f}%)" if share is not None else ""
        return text

    def __str__(self) -> str:
        what = "median time per call (quartiles)"
        if self.sweep.rate is not None:
            what = f"median {self.sweep.rate}"
            peaks = {self._peak(label) for label in self.times} - {None}
            if len(peaks) == 1:
                what += f" (share of the {peaks.pop()} peak)"
            elif peaks:
                what += " (share of each one's peak)"
        rows = tuple(
            (_size_text(n), *(self._cell(label, n) for label in self.times))
            for n in self.sizes
        )
        header = (self.sweep.size_label.split(" (")[0], *self.times)
        return str(Table(header, rows, title=f"{self.sweep.name}: {what}"))

    __repr__ = __str__

    def plot(
        self,
        ax: Any = None,
        *,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
        record: str | None = None,
    ) -> None:
        """Draw each variant's times or rates against size with quartile bands;
        ``labels`` renames legend entries, ``record`` records each point."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots()
        if self.sweep.rate is None:
            medians = [m.median_s for ms in self.times.values() for m in ms if m]
            scale, unit = unit_scale(min(medians, default=1e-3), "s")
            what = "time"
        else:
            top = max(self.rate(k, n).value for k in self.times for n in self.ran(k))
            scale, unit = unit_scale(top, self.sweep.rate)
            what = "FLOP rate" if self.sweep.rate == "FLOP/s" else "bandwidth"
        series = {
            (labels or {}).get(label, label): [
                self._scaled(m, self._size_of(label, n), scale)
                for n, m in zip(self.sizes, ms, strict=True)
            ]
            for label, ms in self.times.items()
        }
        plot_sweep(
            ax,
            self.sizes,
            series,
            xlabel=self.sweep.size_label,
            ylabel=f"{what} ({unit})",
            title=title or self.sweep.name,
            device=next(iter(self.devices.values())),
            value=lambda v: v,
            record=record,
        )

    def _scaled(
        self, m: Measurement | None, n: int, scale: float
    ) -> Measurement | None:
        if m is None:
            return None
        if self.sweep.rate is None:
            values = tuple(t / scale for t in m.times_s)
        else:
            work = self._work()[0](n)
            values = tuple(work / t / scale for t in m.times_s if t > 0)
        return Measurement(m.label, values or (0.0,), m.device, m.method)
