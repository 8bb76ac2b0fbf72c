#!/usr/bin/env python3
"""Peer baseline on the GPU machine: HF transformers generate() on Qwen2.5-shaped random bf16 weights,
plus the machine's two ceilings (device copy bandwidth, bf16 GEMM rate). Prints one JSON line per result.
--quick: only the workloads redlm's GPU benchmark runs (prefill 8 x 2048, batch 1 512->128, batch 64
512->256), so the peer fits in one device call beside it."""
import json, time, os, sys
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.backends.cuda.matmul.allow_tf32 = True
R = []


def emit(**kw):
    print(json.dumps(kw), flush=True)
    R.append(kw)


def ceilings():
    n = 2 * 1024 ** 3
    a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
    for _ in range(3): b.copy_(a)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): b.copy_(a)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
    emit(what="copy_bandwidth_TBps", value=2 * n / dt / 1e12)
    del a, b
    x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda"); y = torch.randn_like(x)
    for _ in range(3): x @ y
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): x @ y
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
    emit(what="bf16_gemm_TFLOPs", value=2 * 8192 ** 3 / dt / 1e12)


SHAPES = {
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "qwen2.5-14b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=48, num_attention_heads=40,
                        num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
}


def model(shape):
    cfg = Qwen2Config(max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6, **SHAPES[shape])
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        m = Qwen2ForCausalLM(cfg)
        torch.set_default_dtype(torch.float32)
    m.eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


@torch.no_grad()
def gen(m, batch, plen, olen, shape, tag, **extra):
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, 150000, (batch, plen), device="cuda", generator=g)
    att = torch.ones_like(ids)
    kw = dict(do_sample=False, max_new_tokens=olen, min_new_tokens=olen, **extra)
    m.generate(ids[:, :16], attention_mask=att[:, :16], do_sample=False, max_new_tokens=4, min_new_tokens=4, **extra)
    torch.cuda.synchronize(); t = time.perf_counter()
    out = m.generate(ids, attention_mask=att, **kw)
    torch.cuda.synchronize(); dt = time.perf_counter() - t
    assert out.shape[1] == plen + olen, out.shape
    emit(what="hf_generate", shape=shape, tag=tag, batch=batch, prompt=plen, output=olen, seconds=dt,
         output_tok_per_s=batch * olen / dt, total_tok_per_s=batch * (plen + olen) / dt,
         peak_mem_GB=torch.cuda.max_memory_allocated() / 1e9)


@torch.no_grad()
def prefill(m, batch, plen, shape):
    ids = torch.randint(0, 150000, (batch, plen), device="cuda")
    m(ids[:, :64]); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(3): m(ids, logits_to_keep=1)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 3
    emit(what="hf_prefill", shape=shape, batch=batch, prompt=plen, seconds=dt, tok_per_s=batch * plen / dt)


def main():
    quick = "--quick" in sys.argv[1:]
    ceilings()
    t0 = time.time()
    for shape in ("qwen2.5-7b", "qwen2.5-14b"):
        m = model(shape)
        emit(what="params", shape=shape, n=sum(p.numel() for p in m.parameters()))
        prefill(m, 8, 2048, shape)
        gen(m, 1, 512, 128, shape, "latency")
        gen(m, 64, 512, 256, shape, "throughput")
        if shape == "qwen2.5-7b" and not quick:
            gen(m, 256, 512, 128, shape, "throughput-256")
            if time.time() - t0 < 240:
                try:
                    gen(m, 1, 512, 128, shape, "latency-static-cache", cache_implementation="static")
                except Exception as e:
                    emit(what="error", tag="static", err=str(e)[:300])
        del m; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    json.dump(R, open(os.path.join(os.environ.get("OUT", "."), "peer_hf.json"), "w"), indent=1)


main()
