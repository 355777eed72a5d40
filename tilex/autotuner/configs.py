"""The configuration list: its spellings, and the per-configuration ``pass_configs`` key (TileLang's).

``configs`` is a list of dicts of factory keyword arguments, or a dict of lists (their cartesian product,
:func:`expand_configs`). A configuration may also hold the key ``"pass_configs"``: a dict of compile options applied
to that configuration's compilation only, over the tuner's own ``pass_configs`` (:func:`merge_pass_configs`; per
option, the configuration's value wins). It is not a factory argument unless the factory has a parameter of that
name, in which case it is passed to the factory too (TileLang does the same). :func:`split_config` separates the two.
"""
from __future__ import annotations

import itertools

from tilex import config as tconfig

__all__ = ["PASS_CONFIGS", "expand_configs", "split_config", "merge_pass_configs"]

#: the reserved configuration key that holds a configuration's own compile options
PASS_CONFIGS = "pass_configs"


def expand_configs(configs) -> list:
    """A configuration list from a list of dicts (as is) or a dict of lists (the cartesian product of its values; a
    value that is not a list or tuple is one choice). TypeError for anything else that is not iterable."""
    if isinstance(configs, dict):  # {"bm": [64, 128], "bn": [...]} -> cartesian product
        keys = list(configs)
        values = [v if isinstance(v, (list, tuple)) else [v] for v in configs.values()]
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    return list(configs)


def split_config(cfg: dict, factory_takes_pass_configs: bool = False) -> tuple[dict, dict | None]:
    """(the factory's keyword arguments, the configuration's own pass_configs or None) of one configuration.
    ``"pass_configs"`` stays among the factory's arguments too when the factory has a parameter of that name.
    TypeError when its value is not a dict (or None)."""
    own = cfg.get(PASS_CONFIGS)
    if own is not None and not isinstance(own, dict):
        raise TypeError(f"tilex.autotune: a configuration's '{PASS_CONFIGS}' must be a dict of compile options, got "
                        f"{type(own).__name__} in {cfg!r}")
    if factory_takes_pass_configs:
        return dict(cfg), own or None
    return {k: v for k, v in cfg.items() if k != PASS_CONFIGS}, own or None


def merge_pass_configs(base: dict | None, own: dict | None) -> dict | None:
    """``base`` (the tuner's pass_configs) with a configuration's ``own`` over it. A key of ``base`` that sets one of
    the options an ``own`` key sets (another spelling of it: ``tl.disable_tma_lower`` and ``tilex.disable_tma``) is
    dropped, so the configuration's value wins instead of the two disagreeing. ``base`` itself when ``own`` is
    empty."""
    if not own:
        return base
    own = tconfig.plain(own)
    if not base:
        return own
    try:
        own_options = _options_of(own)
    except Exception:  # noqa: BLE001 - a key the compiler refuses: that configuration's compilation reports it
        own_options = set()
    merged = {}
    for key, value in tconfig.plain(base).items():
        if key in own:
            continue
        try:
            overlap = bool(_options_of({key: value}) & own_options)
        except Exception:  # noqa: BLE001 - likewise
            overlap = False
        if not overlap:
            merged[key] = value
    merged.update(own)
    return merged


def _options_of(pass_configs: dict) -> set:
    """The names of the options (tilex's and TVM's) that `pass_configs` sets."""
    ours, theirs = tconfig.split(pass_configs)
    return {("tilex", k) for k in ours} | {("tvm", k) for k in theirs}
