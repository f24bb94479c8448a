"""Tiny random-weight llama GGUF with the llama-spm vocabulary (for GPU error captures only)."""
import sys, numpy as np, gguf
src = gguf.GGUFReader(sys.argv[1]); out = sys.argv[2]
w = gguf.GGUFWriter(out, "llama")
skip = {"general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
for f in src.fields.values():
    if f.name in skip or f.name.startswith("llama.") or not f.name.startswith("tokenizer."): continue
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        st = f.types[-1]
        if st == gguf.GGUFValueType.STRING:
            vals = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
        else:
            vals = [f.parts[i].tolist()[0] for i in f.data]
        w.add_array(f.name, vals)
    elif t == gguf.GGUFValueType.STRING:
        w.add_string(f.name, bytes(f.parts[f.data[0]]).decode())
    else:
        w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], t)
E, L, H, HKV, FF, V = 128, 2, 2, 1, 256, 32000
w.add_name("tiny-random-llama"); w.add_context_length(4096); w.add_embedding_length(E); w.add_block_count(L)
w.add_feed_forward_length(FF); w.add_head_count(H); w.add_head_count_kv(HKV); w.add_rope_dimension_count(E // H)
w.add_layer_norm_rms_eps(1e-5); w.add_file_type(1)
rng = np.random.default_rng(0)
def t(name, *shape): w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))
t("token_embd.weight", V, E); w.add_tensor("output_norm.weight", np.ones(E, np.float32)); t("output.weight", V, E)
D = E // H
for i in range(L):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32)); w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
    t(p + "attn_q.weight", E, E); t(p + "attn_k.weight", HKV * D, E); t(p + "attn_v.weight", HKV * D, E); t(p + "attn_output.weight", E, E)
    t(p + "ffn_gate.weight", FF, E); t(p + "ffn_up.weight", FF, E); t(p + "ffn_down.weight", E, FF)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
