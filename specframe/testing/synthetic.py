"""Tiny random llama-architecture GGUF models, written with the ``gguf`` package in milliseconds.

They load and generate through the real libllama, so tests and the build's smoke test exercise real
computation without downloading anything. Two models written from the same ``seed`` share weights; ``noise``
perturbs them, which makes a same-vocabulary draft model that mostly agrees with its target.
"""

from __future__ import annotations

import os
import pathlib
import string
from dataclasses import dataclass

import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class SyntheticShape:
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 2048
    n_expert: int = 0          # > 0: a mixture of experts, each layer's feed-forward split into n_expert of them
    n_expert_used: int = 2


def synthetic_vocab() -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, characters, ▁-prefixed characters and
    letter pairs, so that any text tokenizes (byte fallback) and common text merges into multi-char pieces."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    chars = string.ascii_letters + string.digits + string.punctuation
    pieces = ["▁"] + list(chars) + ["▁" + c for c in chars] + [a + b for a in "etaoinshrd" for b in "etaoinshrd"]
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


def write_synthetic_model(path: str | os.PathLike, *, seed: int = 0, noise: float = 0.0, noise_seed: int = 1,
                          shape: SyntheticShape = SyntheticShape(), quantize: bool = False,
                          shuffle_vocab: int | None = None, chat_template: str | None = CHATML_TEMPLATE,
                          split_max_tensors: int = 0) -> str:
    """Write a random float32 (or Q8_0 when ``quantize``) llama model to ``path``; return the path.

    ``split_max_tensors`` > 0 writes a split model instead, at most that many tensors a part, named as llama.cpp's
    gguf-split names them (``NAME-00001-of-00003.gguf`` beside ``path``); the first part's path is returned.

    ``shuffle_vocab`` (a seed) gives the tokens other ids, moving their weights with them: the same model over
    text, with a vocabulary no draft compatibility check accepts, for token mapping. ``chat_template=None``
    writes a model without one (a base model)."""
    import gguf

    path = os.fspath(path)
    tokens, scores, types = synthetic_vocab()
    n_vocab, s = len(tokens), shape
    order = np.arange(n_vocab)
    if shuffle_vocab is not None:    # new id i holds old token order[i]; the three special ids stay
        order[3:] = 3 + np.random.default_rng(shuffle_vocab).permutation(n_vocab - 3)
        tokens, scores, types = [tokens[i] for i in order], [scores[i] for i in order], [types[i] for i in order]
    head_dim = s.n_embd // s.n_head
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(noise_seed)

    def weight(*dims: int, scale: float) -> np.ndarray:
        w = (rng.standard_normal(dims) * scale).astype(np.float32)
        if noise:
            w += (noise_rng.standard_normal(dims) * scale * noise).astype(np.float32)
        return w

    writer = gguf.GGUFWriter(path, "llama", split_max_tensors=split_max_tensors)
    writer.add_context_length(s.n_ctx)
    writer.add_embedding_length(s.n_embd)
    writer.add_block_count(s.n_layer)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    if s.n_expert:
        writer.add_expert_count(s.n_expert)
        writer.add_expert_used_count(s.n_expert_used)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantize else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def add(name: str, array: np.ndarray) -> None:
        if quantize and array.ndim == 2:
            q = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, array)

    inv = 1.0 / np.sqrt(s.n_embd)
    add("token_embd.weight", weight(n_vocab, s.n_embd, scale=1.0)[order])
    for i in range(s.n_layer):
        add(f"blk.{i}.attn_norm.weight", np.ones(s.n_embd, dtype=np.float32))
        add(f"blk.{i}.attn_q.weight", weight(s.n_embd, s.n_embd, scale=inv))
        add(f"blk.{i}.attn_k.weight", weight(s.n_head_kv * head_dim, s.n_embd, scale=inv))
        add(f"blk.{i}.attn_v.weight", weight(s.n_head_kv * head_dim, s.n_embd, scale=inv))
        add(f"blk.{i}.attn_output.weight", weight(s.n_embd, s.n_embd, scale=inv))
        add(f"blk.{i}.ffn_norm.weight", np.ones(s.n_embd, dtype=np.float32))
        if s.n_expert:   # the tensors llama.cpp's --cpu-moe keeps on the CPU: blk.N.ffn_{gate,up,down}_exps
            add(f"blk.{i}.ffn_gate_inp.weight", weight(s.n_expert, s.n_embd, scale=inv))
            add(f"blk.{i}.ffn_gate_exps.weight", weight(s.n_expert, s.n_ff, s.n_embd, scale=inv))
            add(f"blk.{i}.ffn_up_exps.weight", weight(s.n_expert, s.n_ff, s.n_embd, scale=inv))
            add(f"blk.{i}.ffn_down_exps.weight", weight(s.n_expert, s.n_embd, s.n_ff, scale=1.0 / np.sqrt(s.n_ff)))
            continue
        add(f"blk.{i}.ffn_gate.weight", weight(s.n_ff, s.n_embd, scale=inv))
        add(f"blk.{i}.ffn_up.weight", weight(s.n_ff, s.n_embd, scale=inv))
        add(f"blk.{i}.ffn_down.weight", weight(s.n_embd, s.n_ff, scale=1.0 / np.sqrt(s.n_ff)))
    add("output_norm.weight", np.ones(s.n_embd, dtype=np.float32))
    # A wide output layer spreads the logits so greedy choices are rarely near-ties.
    add("output.weight", weight(n_vocab, s.n_embd, scale=4.0 * inv)[order])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return os.fspath(writer.format_shard_names(pathlib.Path(path))[0])
