"""The planted arms' report: figures vs Γ and the markdown section, read only from the files
``planted_run`` wrote (planted_arms.csv, planted_checkpoints.csv, planted_floor.csv,
planted_meta.json)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import planted_replicates as rep  # noqa: E402
from .planted_budget import measure_text  # noqa: E402
from .planted_measure import account  # noqa: E402
from .planted_reading import reading  # noqa: E402
from ..shared import calls_text, finish_figure, fmt, read_rows, upath  # noqa: E402
from sbjax.atomic import atomic_write_text  # noqa: E402

PLANTED_FIGS = {"loss": "fig_planted_loss_gamma.png",
                "kl_anisotropy": "fig_planted_kl_anisotropy_gamma.png"}

ACCOUNTS = {
    "width": "the **width** account: only the arms with d ≤ {small_d} rise, whatever λ",
    "gamma": "the **Γ** account: the rise follows λ·Ση (the arms at Γ ≈ 7.9 rise, those at "
             "Γ ≈ 2.4 do not), whatever d",
    "neither": "**neither** account: no arm rises, so width and Γ do not set the trajectory "
               "(the gap-to-floor column says whether the bottleneck floor(d) sets the level)",
    "both": "both accounts at once: these arms do not separate width from Γ",
    "mixed": "no single account: the pattern of rises follows neither width nor Γ alone",
    "inconclusive": "no account yet: at least one arm's rise CI straddles the threshold",
}


def _by_arm(rows):
  out = {}
  for r in rows:
    out.setdefault(r["arm"], []).append(r)
  return out


def draw(out: Path) -> None:
  out = upath(out)
  arms = read_rows(out / "planted_arms.csv")
  ck = _by_arm(read_rows(out / "planted_checkpoints.csv"))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for i, a in enumerate(arms):
    rs, c = ck[a["arm"]], colors[i % len(colors)]
    ax.plot([r["gamma"] for r in rs], [r["expected_loss"] for r in rs], "-", color=c,
            label=f"{a['arm']} (Γ_total {a['gamma_total']:.2f})")
    ax.axhline(a["floor"], color=c, ls="--", lw=0.8)
  ax.axhline(arms[0]["H"], color="k", ls=":", lw=0.8, label="H (entropy rate)")
  lo = min(a["H"] for a in arms)
  ax.set_ylim(lo - 0.05, max(a["floor"] for a in arms) + 1.0)
  ax.set_xlabel("Γ = λ Σ η (weight-decay timescales)")
  ax.set_ylabel("expected loss (nats), fixed validation windows")
  ax.set_title("Planted mixture: expected loss vs Γ; dashed: floor(d)")
  ax.legend(fontsize=7)
  finish_figure(fig, out / PLANTED_FIGS["loss"])
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
  for i, a in enumerate(arms):
    rs, c = ck[a["arm"]], colors[i % len(colors)]
    g = [r["gamma"] for r in rs]
    a1.plot(g, [r["kl_centred"] for r in rs], "-", color=c, label=f"{a['arm']} centred")
    a1.plot(g, [r["kl_raw"] for r in rs], ":", color=c, label=f"{a['arm']} raw")
    a2.plot(g, [r["anisotropy_last"] for r in rs], "-", color=c, label=a["arm"])
  a1.set_xlabel("Γ")
  a1.set_ylabel("KL(σ ‖ u) of the head (nats)")
  a1.set_title("Head spectrum: centred (solid) and raw (dotted)")
  a2.set_xlabel("Γ")
  a2.set_ylabel("last-layer anisotropy")
  a2.set_title("Anisotropy of the final-norm features")
  a1.legend(fontsize=6)
  a2.legend(fontsize=7)
  finish_figure(fig, out / PLANTED_FIGS["kl_anisotropy"])


def _table(arms) -> list[str]:
  lines = ["| arm | d | λ | Γ_total | rise (nats) | 95% CI | rise? | onset step | Γ at rise | "
           "train rise | coincidence (KL) | final E[loss] | floor(d) | gap to floor | "
           "final KL raw / centred | final anisotropy |",
           "|" + "---|" * 16]
  for a in arms:
    lines.append(
        f"| {a['arm']} | {fmt(a['d'])} | {fmt(a['weight_decay'])} | {fmt(a['gamma_total'], 3)} | "
        f"{fmt(a['rise'], 3)} | [{fmt(a['rise_ci_lo'], 3)}, {fmt(a['rise_ci_hi'], 3)}] | "
        f"{a['rise_verdict']} | {fmt(a['rise_onset_step'])} | {fmt(a['gamma_at_rise'], 3)} | "
        f"{fmt(a['train_rise'], 3)} | {a['coincidence']} ({a['coincidence_kl']}) | "
        f"{fmt(a['final_expected_loss'])} | {fmt(a['floor'])} | {fmt(a['gap_to_floor'], 3)} | "
        f"{fmt(a['final_kl_raw'], 3)} / {fmt(a['final_kl_centred'], 3)} | "
        f"{fmt(a['final_anisotropy'], 3)} |")
  return lines


def _split(arms: list[dict], lang: dict) -> tuple[list[dict], list[dict]]:
  """(the preset's arms: seed 0 on the preset's language, the replicates and other
  languages); rows without seed / vocab / zipf columns are the former."""
  def base(a):
    return (int(a.get("seed") or 0) == 0 and int(a.get("vocab") or lang["vocab"]) == lang["vocab"]
            and float(a.get("zipf") or lang.get("zipf", 1.0)) == float(lang.get("zipf", 1.0)))
  return [a for a in arms if base(a)], [a for a in arms if not base(a)]


def _replicates(arms: list[dict], lang: dict, k: dict) -> list[str]:
  return ["### Replicates and other languages", "",
          "Every arm of the run by language, width and seed (seed s: train.seed = "
          "train.data_seed = s, i.e. another init and another order of the same fresh train "
          "tokens; the language and the validation windows are the same for every seed).", "",
          *rep.table(arms, lang), "", rep.replicates_text(arms, lang, k["threshold"]), ""]


def _device_lines(meta: dict, k: dict, lang: dict) -> list[str]:
  """The run's set-up beyond the cpu presets': populations, the device sampler, the floor
  bound, the rarest token, the budget's estimates and stop (from planted_meta.json)."""
  out = []
  if k.get("population"):
    seeds: dict = {}
    for a in k.get("arms", []):
      seeds.setdefault(a["d"], set()).add(a["seed"])
    out.append("Arms of one width train as ONE population (one vmapped step; members differ "
               "in λ and seed, seed s = train.seed = train.data_seed); seeds per width, "
               "chosen by cost before any run: " + ", ".join(
                   f"d {d}: {len(s)}" for d, s in sorted(seeds.items())) + ".")
  dts = sorted({a.get("dtype", "float32") for a in k.get("arms", [])})
  if dts and dts != ["float32"]:
    out.append(f"Compute dtype: {', '.join(dts)} (model.dtype; parameters, softmax and loss "
               "stay float32).")
  if meta.get("sampler") == "device":
    out.append("Train tokens are drawn fresh every step inside the jitted step "
               "(data.options.sampler = device: no stored stream, no host transfer).")
  if k.get("floor_mode") == "svd":
    out.append("floor(d) here is the svd bound (planted_floor.py): the value of the rank-d "
               "truncated SVD of the π-weighted centred log-probabilities, a certified upper "
               "bound, H ≤ floor(d) ≤ bound(d), not the fitted floor (hours at this V on a "
               "CPU); a negative gap to it means the model beat the bound, not the floor.")
  rare = meta.get("rarest_token")
  if rare:
    out.append(f"Rarest token: {rare['token']}, marginal probability {rare['probability']:.3g},"
               f" expected {rare['expected_count']:.1f} times in the {rare['n_tokens']:,} "
               f"training tokens of one arm (P(never seen) ≈ {rare['p_absent_poisson']:.2g}); "
               f"{meta.get('types_below_50', 0)} of {lang['vocab']} types are expected fewer "
               "than 50 times.")
  out += _budget_lines(meta, k)
  out += calls_text(meta.get("runs") or [])
  return [" ".join(out), ""] if out else []


def _budget_lines(meta: dict, k: dict) -> list[str]:
  """The budget clock's estimates (with or without the measurement), its measurement rate,
  the member-checkpoints measured vs read from the cache per population, and how the latest call ended when it did not finish (a budget stop or a cut-off)."""
  out = []
  for name, e in meta.get("estimates", {}).items():
    said = measure_text(e)
    out.append(f"Time estimate of population {name}: {e['s_per_step']:.4g} s/step over its "
               f"{e['steps']} steps, measured after {k.get('estimate_at')} steps (projected "
               f"end {e['projected_end_s']:g} s into the run{'; ' + said if said else ''}).")
  if meta.get("s_per_measure"):
    out.append(f"Measurement of the checkpoints in the latest call: {meta['s_per_measure']:.3g}"
               " s per member-checkpoint (a load, the forward on the validation windows and "
               "the head's SVD; the slowest population's rate, the floors excluded).")
  floor_s = (meta.get("timings") or {}).get("floor_s")
  if floor_s:
    out.append(f"The floors (planted_floor*.csv) took {floor_s:g} s in the latest call, "
               "computed before the training of their language's first population: inside "
               "the budget clock's time (a later call reads them back).")
  counts = {n: t for n, t in (meta.get("timings") or {}).items()
            if isinstance(t, dict) and "cached" in t}
  if counts:
    out.append("Member-checkpoints measured after training in the latest call / read from "
               "the cache (planted_measure.json: measured by an earlier call, or by this "
               "call's probe during training; the same numbers): " + ", ".join(
                   f"{n} {t['measured']} / {t['cached']}" for n, t in counts.items()) + ".")
  not_run = ", ".join(meta.get("not_run") or []) or "none"
  if meta.get("stopped"):
    out.append(f"**Stopped by the time budget ({k.get('budget_s'):g} s)**: {meta['stopped']}. "
               f"Not run yet: {not_run}; rerunning the same command resumes.")
  elif meta.get("not_run"):
    out.append("**The latest call did not reach its end** (no budget stop recorded: it was cut "
               f"off, e.g. by `timeout`, or failed). Not measured in it: {not_run}; "
               "rerunning the same command resumes.")
  return out


def _set_aside_lines(meta: dict, arms: list[dict]) -> list[str]:
  """The damaged checkpoints the measurement set aside (planted_meta.json's ``set_aside`` and
  ``excluded``, ``planted_measure``): per member, which steps and why, and how many
  checkpoints its statistics use instead."""
  by_arm, out = {a["arm"]: a for a in arms}, []
  for name, recs in (meta.get("set_aside") or {}).items():
    gone = [r for r in recs if not r.get("saved_again")]
    said = "; ".join(f"step {r['step']} set aside ({r['reason']})" for r in gone)
    if name in (meta.get("excluded") or []):
      out.append(f"{name}: {said}; no checkpoint of it reads, so it is excluded from the "
                 "table, the account and the answer (not retrained: a population is resumed "
                 "only while every member holds a checkpoint).")
      continue
    a = by_arm.get(name)
    if gone and a is not None:
      last = int(a["last_step"])
      out.append(f"{name}: {said}; its rise and the other statistics use "
                 f"{int(a['checkpoints_used'])} of {int(a['checkpoints_saved'])} checkpoints, "
                 "computed without the step(s) set aside" + (
                     f"; its final-* columns are of step {last}, the newest that reads (a "
                     "rerun of the same command resumes its population's training from the "
                     "newest step every member holds and saves the final step again)"
                     if last < int(a["steps"]) else "") + ".")
    for r in recs:
      if r.get("saved_again"):
        out.append(f"{name}: step {r['step']} was set aside by an earlier call "
                   f"({r['reason']}) and saved again since by resumed training; it is "
                   "measured again and used.")
  if not out:
    return []
  return ["**Damaged checkpoints set aside** (moved to the member's checkpoints_bad/ by the "
          "measurement after training, never deleted; planted_measure.json, planted_meta.json "
          "and planted_arms.csv's set_aside column list them): " + " ".join(out), ""]


ANSWERS = {"width": "only at small d (width)", "gamma": "only at Γ ≈ 7.9 (the optimiser)",
           "neither": "nowhere", "both": "undecided (width and Γ change together)",
           "mixed": "undecided (the rises follow neither width nor Γ alone)",
           "inconclusive": "undecided (a rise CI straddles the threshold)"}


def _answer(arms: list[dict], acc: str, k: dict, partial: bool) -> list[str]:
  """Issue 32's question, answered from the account of the seed-0 arms (device presets)."""
  if not k.get("population"):
    return []
  ds = ", ".join(str(d) for d in sorted({int(a["d"]) for a in arms}))
  gammas = ", ".join(fmt(g, 3) for g in sorted({float(a["gamma_total"]) for a in arms}))
  return [f"**Question: does a late rise appear only at small d (width), only at Γ 7.9 (the "
          f"optimiser), or nowhere?** Answer from these arms (seed 0; d {ds}; Γ {gammas}; "
          f"small d = d ≤ {k.get('small_d')}): **{ANSWERS[acc]}**"
          + (" — from the populations that finished before the budget stop only."
             if partial else "."), ""]


def _row_norm_lines(arms: list[dict]) -> list[str]:
  """The final head row norms: rare vs frequent tokens (when measured)."""
  if not arms or "final_rare_row_norm" not in arms[0]:
    return []
  return ["| arm | final ‖W_w‖ rare | frequent | mean over V |", "|---|---|---|---|",
          *[f"| {a['arm']} | {fmt(a['final_rare_row_norm'], 3)} | "
            f"{fmt(a['final_frequent_row_norm'], 3)} | {fmt(a['final_row_norm_mean'], 3)} |"
            for a in arms], "",
          "Rare / frequent: the mean row norm of the head over the V/128 tokens of smallest / "
          "largest stationary probability (at least one).", ""]


def report_section(out: Path, rel: str = ".") -> str:
  """The markdown section of the planted arms (draws the figures): the table and reading of
  the preset's arms, then the replicates (other seeds, other languages) when the run has
  them."""
  out = upath(out)
  meta = json.loads((out / "planted_meta.json").read_text())
  measured = (out / "planted_arms.csv").exists()  # no population finished: no table
  all_arms = read_rows(out / "planted_arms.csv") if measured else []
  measured = bool(all_arms)  # (none when every member measured so far was excluded)
  if measured:
    draw(out)
  ck = _by_arm(read_rows(out / "planted_checkpoints.csv")) if measured else {}
  k, lang = meta["knobs"], meta["language"]
  arms, others = _split(all_arms, lang)
  acc = account(arms, small_d=k.get("small_d", 16)) if others else meta["account"]
  n_yes = sum(a["rise_verdict"] == "yes" for a in arms)
  n_coin = sum(a["coincidence"] == "yes" for a in arms)
  lines = [
      "## Saturation on the planted mixture language (arms of width and Γ)", "",
      f"Language: planted mixture, V = {lang['vocab']}, M = {lang.get('n_mix')}, k = "
      f"{lang['rank']}, H = {fmt(lang['entropy_nats'])} nats; fresh tokens every step "
      f"({meta['tokens_per_arm']:,} per arm, {meta['steps']} steps of {k['batch']} x "
      f"{k['seq_len']}); AdamW β = (0.9, 0.95), clip 1, η = {k['lr']:g}, {k['warmup_frac']:.0%} "
      "warm-up, cosine to 10%. Γ = λ Σ η. Expected loss = the Rao-Blackwellised loss on "
      f"{k['val_windows']} fixed validation windows (paired across checkpoints). Rise: the "
      f"expected loss ≥ {k['threshold']} nats above its running minimum after "
      f"{k['after']:.0%} of training; CI: paired bootstrap over the windows ({k['n_boot']} "
      "draws); 'yes' when the CI's lower end clears the threshold, 'no' when its upper end is "
      f"below it. Coincidence: a KL(σ‖u) jump ≥ {k['kl_jump']} nat (raw or centred, named) and "
      f"anisotropy ≥ {k['anisotropy_level']} within ±1 checkpoint of the rise onset.", ""]
  lines += _device_lines(meta, k, lang)
  lines += _set_aside_lines(meta, all_arms)
  if arms:
    lines += [*_table(arms), "",
              f"![expected loss vs Γ]({rel}/{PLANTED_FIGS['loss']})",
              f"![KL and anisotropy vs Γ]({rel}/{PLANTED_FIGS['kl_anisotropy']})", "",
              f"{n_yes} of {len(arms)} arms (seed 0, this language) show a late rise and "
              f"{n_coin} a coincident spectrum collapse; account: {acc} "
              f"({ACCOUNTS[acc].format(small_d=k.get('small_d', 16))}).", "",
              *_answer(arms, acc, k, bool(meta.get("not_run"))),
              *_row_norm_lines(arms),
              reading(arms, ck, k, acc), ""]
  elif not all_arms and meta.get("excluded"):
    lines += ["No arm has a checkpoint that reads (every member measured so far is excluded, "
              "above): there is no table, figure or answer.", ""]
  elif not all_arms:
    lines += ["No population has finished in this folder yet: no arm is measured, so there "
              "is no table, figure or answer.", ""]
  if others:
    lines += _replicates(all_arms, lang, k)
  return "\n".join(lines)


def write_section(out: Path) -> Path:
  """OUT/section.md (figures at ``./``): ``report_section`` of the arms measured so far (after
  a budget stop or a cut-off, of the populations that finished; its text names the stop)."""
  out = upath(out)
  atomic_write_text(out / "section.md", report_section(out, "."))
  return out / "section.md"
