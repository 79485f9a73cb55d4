"""Trace.draw: a trace as the GPU puzzles draw their answers. The grid of threads, each a square
in its colour with threadgroups outlined, then each array as cells: filled in the colour of the
threads that wrote it, dotted in the colour of those that read it. Everything is laid out in
cell units, one panel under the other, top to bottom."""
from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:
    from .tracing import Trace, TracedMemory

_WRAP = 32          # a 1D row longer than this wraps
_MAX_CELLS = 4096   # per panel: beyond, a picture says nothing
_MAX_DOTS = 16      # readers drawn in one cell (a count says how many more)
_OOB = "#d62728"
_SCALE = 0.32       # inches per cell


def draw(t: Trace, path: Optional[str], color_by: str, groups: int) -> Any:
    try:
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
        from matplotlib.patches import Circle, Rectangle
        import matplotlib
    except ImportError as e:
        raise ImportError('Trace.draw needs matplotlib: pip install "metalkit[draw]"') from e
    if color_by not in ("thread", "threadgroup"):
        raise ValueError(f'color_by takes "thread" or "threadgroup", got {color_by!r}')

    gx, gy, gz = t.grid
    nthreads = gx * gy * gz
    (tx, ty, _), (nx, ny, _) = t.threadgroup, t.threadgroups

    def group_of(thread: np.ndarray) -> np.ndarray:
        p = t.thread_positions(thread)
        return p[..., 0] // tx + nx * (p[..., 1] // ty + ny * (p[..., 2] // t.threadgroup[2]))

    ncolors = nthreads if color_by == "thread" else int(np.prod(t.threadgroups))
    cmap = matplotlib.colormaps["tab20" if ncolors <= 20 else "turbo"]

    def color(thread: int) -> Any:
        i = thread if color_by == "thread" else int(group_of(np.int64(thread)))
        return cmap(i % 20) if ncolors <= 20 else cmap(0.05 + 0.9 * i / max(1, ncolors - 1))

    boxes: list[Any] = []    # (patch, facecolor, edgecolor, linewidth, linestyle)
    lines: list[Any] = []    # threadgroup outlines
    texts: list[Any] = []    # (x, y, text, kwargs)
    texts.append((0, 0.9, f"kernel '{t.kernel}'", dict(fontsize=12, weight="bold", va="bottom")))
    y0 = 1.4                 # top of the next panel
    width = 1.0

    def panel(title: str, cells: int) -> None:
        nonlocal y0, width
        if cells > _MAX_CELLS:
            raise ValueError(f"'{t.kernel}': {title} has {cells} cells, too many to draw (at most {_MAX_CELLS}); "
                             "trace a smaller grid")
        texts.append((0, y0 + 0.9, title, dict(fontsize=10, weight="bold", va="bottom")))
        width = max(width, 0.3 * len(title))  # about a bold 10-point character's width, in cells
        y0 += 1.2

    # The threads: by grid position (z layers stacked), or a wrapped row for a 1D grid.
    rows_1d = gy * gz == 1 and gx > _WRAP
    panel(f"threads: grid {t.grid}, threadgroup {t.threadgroup}", nthreads)
    ids = np.arange(nthreads)
    if rows_1d:
        cx, cy = ids % _WRAP, ids // _WRAP
    else:
        p = t.thread_positions(ids)
        cx, cy = p[:, 0], p[:, 1] + gy * p[:, 2]
    at = {(int(x), int(y)): int(g) for x, y, g in zip(cx, cy, group_of(ids))}
    for i, x, y in zip(ids, cx, cy):
        boxes.append((Rectangle((x, y0 + y), 1, 1), color(int(i)), "white", 0.5, "-"))
        if nthreads <= 256:
            r, g_, b, _ = color(int(i))
            ink = "white" if 0.299 * r + 0.587 * g_ + 0.114 * b < 0.45 else "black"  # readable on dark colours
            texts.append((x + 0.5, y0 + y + 0.5, str(i), dict(fontsize=6, ha="center", va="center", color=ink)))
        g = at[(int(x), int(y))]
        for dx, dy, seg in ((-1, 0, [(x, y), (x, y + 1)]), (1, 0, [(x + 1, y), (x + 1, y + 1)]),
                            (0, -1, [(x, y), (x + 1, y)]), (0, 1, [(x, y + 1), (x + 1, y + 1)])):
            if at.get((int(x) + dx, int(y) + dy)) != g:
                lines.append([(a, y0 + b) for a, b in seg])
    width = max(width, float(cx.max()) + 1)
    y0 += float(cy.max()) + 1.8

    def cells(m: TracedMemory, acc: np.ndarray, title: str, shape: tuple[int, ...]) -> None:
        nonlocal y0, width
        outside = sorted({int(e) for e in acc["element"] if e < 0 or e >= m.length})
        if len(shape) > 1:  # rows of the last dimension; out-of-bounds elements in the rows before or after
            cols, lo = shape[-1], 0
        else:  # one row (wrapped), out-of-bounds elements before or after it
            lo = min([0] + outside)
            cols = max(1, min(max([m.length] + [e + 1 for e in outside]) - lo, _WRAP))

        def place(e: int) -> tuple[int, int]:
            return (e - lo) % cols, (e - lo) // cols

        panel(title, m.length)
        rows = [place(e)[1] for e in [0, m.length - 1] + outside]
        top = y0 - min(rows)
        for e in range(m.length):
            x, y = place(e)
            boxes.append((Rectangle((x, top + y), 1, 1), "white", "none", 0, "-"))
        for e in np.unique(acc["element"]):
            here = acc[acc["element"] == e]
            x, y = place(int(e))
            y += top
            writers = np.unique(here["thread"][here["write"]])
            for k, w in enumerate(writers):  # stripes, one per writer
                s = 1 / len(writers)
                boxes.append((Rectangle((x + k * s, y), s, 1), color(int(w)), "none", 0, "-"))
            every = np.unique(here["thread"][here["read"]])
            readers = every[:_MAX_DOTS]
            side = math.ceil(math.sqrt(len(readers)))
            down = math.ceil(len(readers) / side) if side else 0
            r = min(0.22, 0.4 / max(1, side))
            for k, rd in enumerate(readers):  # a block of dots, centred
                cx = 0.5 + (k % side - (side - 1) / 2) / (side + 0.5)
                cy = 0.5 + (k // side - (down - 1) / 2) / (side + 0.5)
                boxes.append((Circle((x + cx, y + cy), r), color(int(rd)), "black", 0.4, "-"))
            if len(every) > len(readers):
                texts.append((x + 0.95, y + 0.95, f"+{len(every) - len(readers)}",
                              dict(fontsize=5, ha="right", va="bottom")))
        for e in range(m.length):  # cell edges over the fills, so equal colours stay apart
            x, y = place(e)
            boxes.append((Rectangle((x, top + y), 1, 1), "none", "0.55", 0.8, "-"))
        for e in outside:
            x, y = place(e)
            boxes.append((Rectangle((x, top + y), 1, 1), "none", _OOB, 1.5, "--"))
        width = max(width, float(cols))
        y0 = top + max(rows) + 1.8

    for name, m in t.memories.items():
        acc = t.accesses(name)
        if not m.threadgroup:
            cells(m, acc, f"{name}  (buffer, {'x'.join(map(str, m.shape))})", m.shape)
            continue
        # One element per thread of a 2D threadgroup: a tile, drawn in the threadgroup's shape.
        tile = m.length == tx * ty and ty > 1
        shape = (ty, tx) if tile else m.shape
        seen = np.unique(acc["group"])
        for g in seen[:groups]:
            pos = (int(g) % nx, int(g) // nx % ny, int(g) // (nx * ny))
            size = f"{ty}x{tx} tile" if tile else str(m.length)
            cells(m, acc[acc["group"] == g], f"{name}  (threadgroup memory, {size}) of threadgroup {pos}", shape)
        if len(seen) > groups:
            texts.append((0, y0, f"... and {len(seen) - groups} more threadgroups", dict(fontsize=8, va="top")))
            y0 += 1

    legend = ("filled: written by (stripes: several writers);  dots: read by;  colour: the "
              f"{color_by};  red dashed: out of bounds")
    texts.append((0, y0 + 0.2, legend, dict(fontsize=7, va="top", color="0.3")))
    y0 += 1
    if t.fault:
        wrapped = textwrap.fill(t.fault.splitlines()[0], width=int(max(6.0, (width + 1) * _SCALE) * 14))
        texts.append((0, y0 + 0.2, wrapped, dict(fontsize=7, va="top", color=_OOB)))
        y0 += 0.5 * (wrapped.count("\n") + 1) + 0.5

    fig = Figure(figsize=(max(6.0, (width + 1) * _SCALE), max(2.0, (y0 + 1) * _SCALE)))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.5, max(width, 6.0 / _SCALE - 1) + 0.5)
    ax.set_ylim(y0 + 0.5, -0.5)
    ax.set_aspect("equal", adjustable="datalim")
    ax.axis("off")
    for patch, face, edge, lw, ls in boxes:
        patch.set(facecolor=face, edgecolor=edge, linewidth=lw, linestyle=ls)
        ax.add_patch(patch)
    ax.add_collection(LineCollection(lines, colors="black", linewidths=1.6))
    for x, y, s, kw in texts:
        ax.text(x, y, s, **kw)
    if path is not None:
        fig.savefig(path, dpi=150)
    return fig
