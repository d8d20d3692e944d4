"""Our models in other tools, and theirs in ours: Hugging Face GPT-2 export (export.py) and import
(import_hf.py), the weight mapping between the two (hf_gpt2.py, plain tensors), and safetensors files."""
