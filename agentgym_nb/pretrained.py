"""Loading a Hugging Face model quietly: every room that loads one (the engine, the trainers, a checkpoint's
export) does it through here."""
from __future__ import annotations


def load_pretrained(model_class, model_dir: str, **kw):
    """`model_class.from_pretrained(model_dir, **kw)` without transformers' "Loading weights" bar. The bar is drawn
    on every load (policy, reference, value model, each checkpoint); for models that load in milliseconds it only
    buries the run's own progress lines."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging
    shown, hub_shown = hf_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()   # turns huggingface_hub's bars off too
    try:
        return model_class.from_pretrained(model_dir, **kw)
    finally:
        if shown:
            hf_logging.enable_progress_bar()   # ... and on: hub's own setting is restored below
        if hub_shown != (not hub_utils.are_progress_bars_disabled()):
            (hub_utils.enable_progress_bars if hub_shown else hub_utils.disable_progress_bars)()
