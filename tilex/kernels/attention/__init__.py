"""Attention tile programs: `backward` (FlashAttention-2-style backward, BHSD) and `decode` (split-KV decoding
with a KV cache, GQA/MQA)."""
