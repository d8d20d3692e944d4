"""A small GPT: `from model import GPT, GPTConfig`. See README.md for what each file holds."""
from .config import GPTConfig, MODEL_PRESETS
from .gpt import GPT
from .kv_cache import KVCache

__all__ = ["GPT", "GPTConfig", "KVCache", "MODEL_PRESETS"]
