"""The HTML pages' building blocks, shared by the fit report, the comparison of two recipes and
the report's notes: the page template, figures embedded with a link to their SVG, tables and
escaping."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def escape(text: Any) -> str:
    return html.escape(str(text), quote=True)


class Figures:
    """Embeds a written PNG in the page and links its SVG."""

    def __init__(self, plot_dir: Path, root: Path) -> None:
        self.plot_dir, self.root = plot_dir, root

    def embed(self, paths: Sequence[Path], caption: str) -> str:
        png = next(p for p in paths if p.suffix == ".png")
        svg = png.with_suffix(".svg").relative_to(self.root).as_posix()
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        return (f"<figure><img alt='{escape(png.stem)}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{escape(caption)} (<a href='{escape(svg)}'>SVG</a>)</figcaption></figure>")


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>flops-fit report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1280px; margin: 2em auto; padding: 0 1em; color: #222; }}
h1 {{ margin-bottom: 0.2em; }} h2 {{ border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }}
.lead {{ color: #555; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; max-width: 100%; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
th {{ background: #f4f4f4; }} td {{ font-variant-numeric: tabular-nums; }}
.row {{ display: flex; flex-wrap: wrap; gap: 2em; }}
img {{ max-width: 100%; }} .warn {{ color: #a40; }} figure {{ margin: 1em 0; }}
figcaption {{ font-size: 0.85em; color: #555; }}
pre {{ white-space: pre-wrap; word-break: break-word; font-size: 0.8em; background: #f8f8f8; padding: 0.5em; }}
</style></head><body>
{body}
</body></html>
"""
