"""Shared pieces of the family tables and figures: picking fields, paper claims, figure setup."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Hashable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tpusim.files import replace_atomically

MODELS = ("gpt3-175b", "megatron-nlg-530b-ms")
# the MeshSlice paper's abstract; docs/validation.md#known-differences-from-the-meshslice-paper
PAPER_SPEEDUP = MappingProxyType({"gpt3-175b": 0.120, "megatron-nlg-530b-ms": 0.234})
TWO_D = ("collective", "wang", "summa", "cannon")
BASELINE = "all"
"""A tune point of ``algorithm: all`` (with ``zero_stage: any`` and ``dp`` free): the practitioner's baseline, the
best layout of any kind the tuner finds (FSDP, FSDP x tensor, D x R x C at every ZeRO stage, every algorithm)."""
ALGORITHM_ORDER = ("collective", "wang", "summa", "cannon", "meshslice", "tp1d", "fsdp", BASELINE)
COLOURS = MappingProxyType({"collective": "#4c72b0", "wang": "#dd8452", "summa": "#55a868", "cannon": "#c44e52",
           "meshslice": "#8172b3", "tp1d": "#937860", "fsdp": "#da8bc3", BASELINE: "#8c8c8c"})


def best_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The configuration a tune point chose (None if the point failed)."""
    result = entry.get("result") or {}
    return result.get("best")


def step_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A step point's result, or a tune point's best, whichever the entry holds."""
    if entry.get("error"):
        return None
    return best_of(entry) or entry.get("result") or None


NOTE_FONTSIZE = 8
ALGORITHM_NOTE = ("Algorithms: collective = all-gather, local GeMM, reduce-scatter (the GSPMD baseline); "
                  "wang = Wang et al. collective matmul in 2D; summa = SUMMA; cannon = Cannon's algorithm (square "
                  "meshes only); meshslice = MeshSlice; tp1d = 1D (Megatron-style) tensor parallelism on a P x 1 "
                  "mesh; all = the best layout of any kind the tuner finds (every algorithm, and where the profile "
                  "takes data axes every D x R x C layout at every ZeRO stage: FSDP, FSDP x tensor, data x tensor). "
                  "Mesh R x C = rows x columns of chips.")


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported when a figure is first drawn (the command line starts
    without matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(columns: int, width: float = 6.0, height: float = 4.2, rows: int = 1) -> tuple[Any, list[Any]]:
    """A figure of rows x columns panels, each width x height inches; the axes in reading order."""
    plt = _pyplot()
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    return fig, list(axes.flat)


def _wrapped(fig: Any, renderer: Any, text: str, fontsize: float) -> Any:
    """Add ``text`` at the bottom left of ``fig``, wrapped (paragraph by paragraph) to the figure's width."""
    limit = 0.98 * fig.bbox.width
    chars = max(40, int(limit / (0.48 * fontsize * fig.dpi / 72)))
    while True:
        lines = [textwrap.fill(paragraph, chars) for paragraph in text.split("\n")]
        artist = fig.text(0.01, 0.0, "\n".join(lines), ha="left", va="bottom", fontsize=fontsize)
        if artist.get_window_extent(renderer).width <= limit or chars <= 40:
            return artist
        artist.remove()
        chars = int(chars * 0.97)


def save(fig: Any, path: Path, title: str, *, note: str | None = None,
         legend: tuple[list[Any], list[str]] | None = None, legend_columns: int | None = None) -> None:
    """Title, lay out and write the figure: below the panels an optional shared legend, then an optional note
    (one paragraph per line of ``note``) explaining the labels; neither overlaps the panels."""
    fig.suptitle(title)
    renderer = fig.canvas.get_renderer()
    gap = 4 / 72 * fig.dpi / fig.bbox.height  # 4 pt, as a fraction of the figure height
    bottom = gap
    if note:
        text = _wrapped(fig, renderer, note, NOTE_FONTSIZE)
        text.set_y(bottom)
        bottom += text.get_window_extent(renderer).height / fig.bbox.height + gap
    if legend and legend[0]:
        handles, labels = legend
        columns = legend_columns or len(labels)
        while True:  # as many columns as fit the figure's width
            box = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, bottom), ncols=columns,
                             fontsize=NOTE_FONTSIZE + 1, frameon=True)
            if columns == 1 or box.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
                break
            box.remove()
            columns -= 1
        bottom += box.get_window_extent(renderer).height / fig.bbox.height + gap
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))
    replace_atomically(Path(path), lambda handle: fig.savefig(handle, format="png", dpi=110), "figure")
    _pyplot().close(fig)


def shared_legend(axes: list[Any]) -> tuple[list[Any], list[str]]:
    """The legend entries of all panels, each label once, in order of first appearance."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels and not label.startswith("_"):
                handles.append(handle)
                labels.append(label)
    return handles, labels


def empty_panel(ax: Any, title: str) -> None:
    """A panel without a single result (e.g. the model fits in HBM nowhere): its title and why it is empty, no
    axes that would suggest a scale."""
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, "no result for any algorithm\n(see the error column of the CSV)", ha="center", va="center",
            transform=ax.transAxes, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def plain_number(value: float, _position: Any = None) -> str:
    """A tick label in plain digits (60, 4, 0.5), never 6x10^1."""
    if value <= 0:
        return ""
    if value >= 1:
        return f"{value:,.0f}" if abs(value - round(value)) < 1e-9 * value else f"{value:,.1f}"
    return f"{value:.3g}"


def by_model(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {m: [] for m in MODELS}
    for row in rows:
        grouped.setdefault(row["model"], []).append(row)
    return {m: r for m, r in grouped.items() if r}


MEMORY_TREATMENTS = ("feasible", "ignored")


def memory_label(point: dict[str, Any]) -> str:
    """How a point treats HBM: ``feasible`` (recomputation and micro-batches chosen to fit) or ``ignored`` (the
    paper's accounting)."""
    return "ignored" if point["ignore_memory"] else "feasible"


def by_panel(rows: list[dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Rows grouped into figure panels, one per model and memory treatment, titled "model, memory X"; and the
    number of panel columns (one row of panels per treatment)."""
    panels: dict[str, list[dict[str, Any]]] = {}
    models = 1
    for treatment in MEMORY_TREATMENTS:
        grouped = by_model([r for r in rows if r.get("memory", "ignored") == treatment])
        models = max(models, len(grouped))
        for model, model_rows in grouped.items():
            panels[f"{model}, memory {treatment}"] = model_rows
    return panels, min(models, len(panels)) or 1


Panels = dict[str, list[dict[str, Any]]]


def panel_figure(rows: list[dict[str, Any]], width: float, height: float) -> tuple[Any, list[Any], Panels]:
    """A figure with the panels of ``by_panel``: its axes in reading order and the rows of each panel."""
    panels, columns = by_panel(rows)
    fig, axes = figure(columns, width=width, height=height, rows=-(-len(panels) // columns))
    return fig, axes, panels


SCALE_SYMBOLS = MappingProxyType({"alpha": "α", "lambda": "λ", "beta": "β", "step": "σ", "op": "op"})
NOMINAL = "as calibrated"
"""The setting label of a point whose profile constants are all unscaled."""


def scale_label(scale: dict[str, float]) -> str:
    """A point's sensitivity setting: its changed ``scale`` factors (``βx0.5``), or ``as calibrated``."""
    changed = [f"{SCALE_SYMBOLS.get(k, k)}x{v:g}" for k, v in scale.items() if v != 1.0]
    return ", ".join(changed) or NOMINAL


def by_setting(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Finished points grouped by sensitivity setting (``scale_label``), the unscaled ones first (possibly none)."""
    grouped: dict[str, list[dict[str, Any]]] = {NOMINAL: []}
    for entry in entries:
        grouped.setdefault(scale_label(entry["point"].get("scale") or {}), []).append(entry)
    return grouped


def step_times(entries: list[dict[str, Any]],
               key: Callable[[dict[str, Any]], Hashable]) -> dict[Any, dict[str, float | None]]:
    """Each comparison's tuned step time per algorithm (None where its point found nothing), the comparison of a
    point being ``key(point)``."""
    times: dict[Any, dict[str, float | None]] = {}
    for entry in entries:
        best = step_of(entry)
        times.setdefault(key(entry["point"]), {})[entry["point"]["algorithm"]] = best["step_time_s"] if best else None
    return times


def meshslice_leads(times: dict[str, float | None]) -> dict[str, float | None]:
    """MeshSlice's speedup T / T_MS - 1 over each algorithm of one comparison's ``times`` (None where a side has
    no time)."""
    ms = times.get("meshslice")
    return {algorithm: (t / ms - 1.0) if (t and ms) else None for algorithm, t in times.items()}


LEAD_FIELDS = ("settings", "low", "low_at", "high", "high_at", "holds")
"""The range columns ``lead_range`` gives a lead column ``X``: ``X_settings`` ... ``X_holds``."""


def lead_range(name: str, leads: dict[str, float | None]) -> dict[str, Any]:
    """The range of the lead column ``name`` over sensitivity settings (``leads``: setting label -> that setting's
    re-tuned lead, None where a side had no result): how many settings have one, the lowest and highest and where,
    and whether every setting agrees in sign with the unscaled lead (None without one, when it is a tie, or
    without another setting). With no scaled setting every column is None, so a table keeps its columns either way."""
    known = {label: lead for label, lead in leads.items() if lead is not None}
    columns: dict[str, Any] = {f"{name}_{field}": None for field in LEAD_FIELDS}
    if len(leads) < 2 or not known:  # run without the sensitivity settings
        return columns
    low = min(known, key=known.__getitem__)
    high = max(known, key=known.__getitem__)
    nominal = known.get(NOMINAL)
    holds = None
    if nominal and len(known) > 1:  # an unscaled tie has no sign to hold
        holds = all((lead > 0) == (nominal > 0) and lead != 0 for lead in known.values())
    columns.update({f"{name}_settings": len(known), f"{name}_low": known[low], f"{name}_low_at": low,
                    f"{name}_high": known[high], f"{name}_high_at": high, f"{name}_holds": holds})
    return columns


MEMORY_NOTE = ("Memory feasible: every configuration fits in HBM (recomputation and micro-batches chosen by the "
               "tuner); memory ignored: the paper's accounting.")


def clip_tall_bars(ax: Any, bars: Any, totals: list[float], names: list[str],
                   extra: list[str] | None = None) -> list[int]:
    """Keep the axis readable when one bar (1D TP) dwarfs the rest: cap the y axis, write each clipped bar's full
    value inside it, marked "(clipped)", after the bar's line of ``extra`` if given. Returns the clipped indices."""
    others = [t for t, n in zip(totals, names, strict=True) if n in TWO_D or n == "meshslice"]
    if not others or max(totals) <= 3 * max(others):
        return []
    limit = 1.6 * max(others)
    ax.set_ylim(0, limit)
    clipped = []
    for index, (bar, total) in enumerate(zip(bars, totals, strict=True)):
        if total > limit:
            clipped.append(index)
            text = f"{total:.0f} s\n(clipped)"
            if extra and extra[index]:
                text = f"{extra[index]}\n{text}"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, limit * 0.97), ha="center", va="top",
                        fontsize=7, color="white", fontweight="bold")
    return clipped


CLIPPED_NOTE = ("(clipped): that bar is far taller than the others, so it is cut at the top of the axis and its "
                "full value is printed inside it.")
