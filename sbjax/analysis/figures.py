"""Figures of analysis rows (metrics.csv, spectrum.npz), matplotlib Agg.

Every function takes a LIST of runs (one, or several to overlay widths, e.g. the saturation
experiment) and their labels. A run is a list of row dicts (as returned by ``analyze_run`` /
``read_csv``); for the heat-map a dict with ``steps`` and ``normalized_top`` arrays. Steps are
plotted on a symmetric-log x axis (linear below 1), so step 0 is shown.

* :func:`plot_loss_anisotropy` - eval loss vs step, points coloured by the
  last-layer anisotropy (Godey et al. 2024, Fig. 3).
* :func:`plot_spectrum_heatmap` - sigma_i / sigma_1 of the head over steps (Fig. 4).
* :func:`plot_kl_uniform` - KL(sigma || uniform) of the head vs step (Fig. 5).
* :func:`draw_run` - the three figures of one analysis.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import colors as mcolors  # noqa: E402

from sbjax.atomic import atomic_path  # noqa: E402
from sbjax.paths import upath  # noqa: E402

FIGURES = {"loss_anisotropy": "fig_loss_anisotropy.png",
           "spectrum_heatmap": "fig_spectrum_heatmap.png",
           "kl_uniform": "fig_kl_uniform.png"}


def _save(fig, path, **kwargs):
  """``fig.savefig`` to ``path`` through the atomic writer (local or remote; a link at
  ``path`` is replaced, not written through)."""
  with atomic_path(path) as tmp:
    fig.savefig(tmp, format="png", **kwargs)
  plt.close(fig)


def _col(rows, key):
  return np.array([float(r.get(key, math.nan)) if r.get(key) is not None else math.nan
                   for r in rows], float)


def _step_axis(ax, steps):
  ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
  ax.set_xlim(left=0, right=max(1, float(np.nanmax(steps))) * 1.3)
  ax.set_xlabel("training step (symlog)")


def plot_loss_anisotropy(runs, path, labels, title="Loss vs step, coloured by anisotropy"):
  """Godey Fig. 3: eval loss vs step, the colour of each checkpoint = anisotropy_last."""
  data = list(runs)
  an_all = np.concatenate([_col(r, "anisotropy_last") for r in data])
  finite = an_all[np.isfinite(an_all)]
  norm = mcolors.Normalize(vmin=float(finite.min()) if finite.size else 0.0,
                           vmax=float(finite.max()) if finite.size and finite.max() > finite.min()
                           else (float(finite.max()) + 1e-6 if finite.size else 1.0))
  markers = "osD^v<>ph*"
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  sc = None
  for i, (rows, lab) in enumerate(zip(data, labels)):
    steps, loss, an = _col(rows, "step"), _col(rows, "eval_loss"), _col(rows, "anisotropy_last")
    ax.plot(steps, loss, "-", color="0.6", lw=1, zorder=1)
    sc = ax.scatter(steps, loss, c=an, cmap="viridis", norm=norm, marker=markers[i % len(markers)],
                    edgecolors="k", linewidths=0.4, zorder=2, label=lab, plotnonfinite=True)
  _step_axis(ax, np.concatenate([_col(r, "step") for r in data]))
  ax.set_ylabel("eval loss (nats)")
  ax.set_title(title)
  if sc is not None:
    fig.colorbar(sc, ax=ax, label="anisotropy (last layer)")
  if len(runs) > 1:
    ax.legend(fontsize=8)
  fig.tight_layout()
  _save(fig, path, dpi=110)


def plot_kl_uniform(runs, path, labels, title="Head spectrum: KL(sigma || uniform)"):
  """Godey Fig. 5: KL(p || u) of the head's normalised singular values vs step."""
  runs = list(runs)
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  all_steps = []
  for rows, lab in zip(runs, labels):
    steps, kl = _col(rows, "step"), _col(rows, "head_kl_uniform")
    all_steps.append(steps)
    ax.plot(steps, kl, "o-", ms=3, label=lab)
  _step_axis(ax, np.concatenate(all_steps))
  ax.set_ylabel("KL(p || u)  (nats)")
  ax.set_title(title)
  if len(runs) > 1:
    ax.legend(fontsize=8)
  fig.tight_layout()
  _save(fig, path, dpi=110)


def plot_spectrum_heatmap(runs, path, labels, title="sigma_i / sigma_1 of the head"):
  """Godey Fig. 4: heat-map of sigma_i/sigma_1 (top k) over checkpoints, one panel per run.

  x = checkpoint (labelled by step; checkpoints are roughly log-spaced), y = index i."""
  specs = list(runs)
  fig, axes = plt.subplots(1, len(specs), figsize=(5.2 * len(specs) + 0.8, 4.2), squeeze=False)
  im = None
  for ax, sp, lab in zip(axes[0], specs, labels):
    top = np.asarray(sp["normalized_top"], float)  # S×k
    steps = np.asarray(sp["steps"])
    n_valid = int(np.max(np.sum(np.isfinite(top), axis=1))) if top.size else 0
    z = np.ma.masked_invalid(top[:, :max(n_valid, 1)].T)  # k×S
    im = ax.imshow(z, aspect="auto", origin="lower", cmap="magma", vmin=0.0, vmax=1.0,
                   interpolation="nearest",
                   extent=(-0.5, len(steps) - 0.5, 0.5, z.shape[0] + 0.5))
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), 8)).round().astype(int))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(int(steps[t])) for t in ticks], rotation=45, fontsize=8)
    ax.set_xlabel("checkpoint step")
    ax.set_ylabel("singular value index i")
    ax.set_title(f"{title}\n{lab}" if len(specs) > 1 else title, fontsize=10)
  if im is not None:
    fig.colorbar(im, ax=axes[0].tolist(), label="sigma_i / sigma_1")
  _save(fig, path, dpi=110, bbox_inches="tight")


def draw_run(out, rows: list, spectrum: dict | None) -> None:
  """The figures of one analysis into ``out`` (those whose columns the rows have)."""
  out, label = upath(out), [upath(out).parent.name]
  if rows and {"eval_loss", "anisotropy_last"} <= set(rows[0]):
    plot_loss_anisotropy([rows], out / FIGURES["loss_anisotropy"], label)
  if rows and "head_kl_uniform" in rows[0]:
    plot_kl_uniform([rows], out / FIGURES["kl_uniform"], label)
  if spectrum is not None:
    plot_spectrum_heatmap([spectrum], out / FIGURES["spectrum_heatmap"], label)
