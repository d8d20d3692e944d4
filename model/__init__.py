"""A small GPT, the architecture only: `from model import GPT, GPTConfig`. How to read it: README.md."""
from .config import GPTConfig
from .gpt import GPT
from .seq2seq import Seq2Seq
from .kv_cache import KVCache

__all__ = ["GPT", "GPTConfig", "KVCache", "Seq2Seq"]
