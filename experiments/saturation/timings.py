"""saturation_meta.json's times across reruns: the first real times are kept.

A rerun over a finished output reads every finished width back (``train_once`` skips it, the
analysis is cached), so its own times for those widths are seconds of reading, not of
training. ``merge`` writes, per width, the times of the call that trained it:

- ``timings``: {width: {"train_s", "analyze_s"}}, of the call that trained the width (taken
  from the earlier meta for a width read back); a width read back with no earlier record
  (the meta was deleted) has this call's times, marked ``"read_back": true``;
- ``seconds``: the wall time of the calls that trained: the earlier meta's ``seconds`` when
  a width's times were kept from it, plus this call's when it trained a width (this call's
  alone when nothing is known of an earlier one);
- ``last_call``: this call's own ``seconds``, ``timings`` and the widths it ``trained``.
"""

from __future__ import annotations


def merge(old: dict, timings: dict, trained, seconds: float) -> dict:
  """The times for the meta (module doc): ``old`` the earlier meta ({} when none), ``timings``
  {key: {"train_s", ...}} and ``seconds`` of this call, ``trained`` the keys (widths, group
  names) this call trained. Keys match by ``str`` (JSON turns a width 8 into "8")."""
  trained = {str(k) for k in trained}
  prev = {str(k): t for k, t in old.get("timings", {}).items() if isinstance(t, dict)}
  first, kept = {}, False
  for k, t in timings.items():
    if str(k) in trained:
      first[k] = dict(t)
    elif str(k) in prev and not prev[str(k)].get("read_back"):
      first[k], kept = dict(prev[str(k)]), True
    else:
      first[k] = {**t, "read_back": True}
  total = (float(old.get("seconds", 0.0)) if kept else 0.0) + (seconds if trained else 0.0)
  if not kept and not trained:
    total = seconds
  return {"timings": first, "seconds": round(total, 1),
          "last_call": {"seconds": round(seconds, 1), "timings": dict(timings),
                        "trained": [k for k in timings if str(k) in trained]}}
