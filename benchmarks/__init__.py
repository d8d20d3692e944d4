"""Measurements that make the attention story visible: sqrt_dk.py (softmax saturation), attention_cost.py (time and
memory vs T)."""
