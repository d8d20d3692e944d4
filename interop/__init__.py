"""Our models in other tools, and theirs in ours: Hugging Face export (export.py) and import (import_hf.py), the
weight mappings (hf_gpt2.py for GPT-2, hf_neox.py for GPT-NeoX: plain tensors), tokenizer.json (hf_tokenizer.py),
safetensors files, and GGUF files for llama.cpp (gguf_file.py)."""
