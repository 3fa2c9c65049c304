"""The gradient sets of bench/models/*.csv as tensor shapes (no torch needed)."""

import re
from pathlib import Path


def read_shapes(csv):
    """(name, shape) per row. The CSVs keep element counts only; a weight's leading dimension is
    the next row's count when that row is its own bias or the batch norm after it (conv/linear
    out channels; the rest flattened to in*kh*kw, as PowerSGD does), else the most common bias size in the file (BERT's hidden
    768) when it divides the count. PowerSGD compresses only tensors of two or more dimensions,
    so the shapes matter to it."""
    rows = []
    for line in Path(csv).read_text().splitlines():
        if line.startswith("#") or line.startswith("name,") or not line.strip():
            continue
        name, n = line.rsplit(",", 1)
        rows.append((name, int(n)))
    vec = [n for name, n in rows if name.endswith("bias")]
    common = max(set(vec), key=vec.count) if vec else 0
    shapes = []
    for i, (name, n) in enumerate(rows):
        module = name.rsplit(".", 1)[0]
        nxt, out = rows[i + 1] if i + 1 < len(rows) else ("", 0)
        follows = nxt == module + ".bias" or re.search(r"(^|\.)(bn\d*|downsample\.1)\.weight$", nxt)
        if name.endswith("weight") and follows and 0 < out < n and n % out == 0:
            shapes.append((name, (out, n // out)))
        elif name.endswith("weight") and common and common < n and n % common == 0:
            shapes.append((name, (n // common, common)))
        else:
            shapes.append((name, (n,)))
    return shapes
