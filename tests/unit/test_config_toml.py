"""``config/dynaq.toml`` documents every setting the node knows, with its default: the
settings of :class:`dynaq.config.Config` and those of the file are compared, so a
setting added to the config model without its entry (or a stale entry) fails here."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from dynaq.config import Config, load_config

TOML = Path(__file__).resolve().parents[2] / "config" / "dynaq.toml"


def _model_settings() -> set[str]:
    defaults = Config()
    return {
        f"{section.name}.{f.name}"
        for section in dataclasses.fields(defaults)
        for f in dataclasses.fields(getattr(defaults, section.name))
    }


def _toml_settings() -> set[str]:
    raw = tomllib.loads(TOML.read_text())
    return {f"{section}.{key}" for section, values in raw.items() for key in values}


def test_the_example_config_lists_every_setting_and_no_other() -> None:
    model, listed = _model_settings(), _toml_settings()
    assert sorted(model - listed) == [], "settings missing from config/dynaq.toml"
    assert sorted(listed - model) == [], "config/dynaq.toml lists settings the node lacks"


def test_the_example_config_gives_every_default() -> None:
    # What the file says is what a node without it runs on.
    assert load_config(TOML, env={}) == Config()
