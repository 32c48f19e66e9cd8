"""Saving an experiment's figures in the format the command asked for (``--fig_format``)."""

from __future__ import annotations

FORMATS = ("png", "pdf", "svg")
_format = ["png"]


def set_format(fmt: str) -> None:
  if fmt not in FORMATS:
    raise ValueError(f"--fig_format={fmt!r}; allowed: {', '.join(FORMATS)}")
  _format[0] = fmt


def name(stem: str) -> str:
  """The file name of figure ``stem`` in the current format."""
  return f"{stem}.{_format[0]}"


def pyplot():
  """matplotlib's pyplot on the non-interactive backend."""
  import matplotlib  # noqa: PLC0415 - only the figures need it

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  return plt


def save(fig, out, stem: str, title: str | None = None) -> str:
  """Write ``fig`` to ``OUT/<stem>.<format>`` (local or remote) and close it; returns the name."""
  import io  # noqa: PLC0415

  from sbjax.atomic import atomic_write_bytes  # noqa: PLC0415 - a link is replaced, not followed
  from sbjax.paths import upath  # noqa: PLC0415

  if title:
    fig.suptitle(title)
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format=_format[0], dpi=110)
  pyplot().close(fig)
  atomic_write_bytes(upath(out) / name(stem), buf.getvalue())
  return name(stem)
