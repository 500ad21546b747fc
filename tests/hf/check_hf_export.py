# Loads model directories written by `cart export --format hf` (hf/export.h) with transformers, as
# a user of the field's tools loads them, and compares them with what CART Lab's LibTorch model
# computed (tests/hf/hf_export_test.cc writes reference.safetensors beside each model):
#   - logits at every loop count the reference holds, in fp32 on the CPU;
#   - decoding with the cache: each position's logits, fed one token (or three) at a time after
#     a prompt, equal the full forward's, and greedy generate() gives the same tokens with and
#     without it;
#   - the tokenizer, where the directory has a tokenizer_ids.json: the ids of each text.
# Prints one JSON object (each directory's largest errors) and exits 1 when a check fails.
#
#   python check_hf_export.py TOLERANCE DIR...

import json
import math
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def relative_error(got, want):
    """max |got − want| over the largest |want|: the error against the logits' own scale."""
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def check(directory, tolerance):
    report = {"dir": os.path.basename(directory), "failures": []}
    fail = report["failures"].append
    model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)
    model.eval()
    ref = load_file(os.path.join(directory, "reference.safetensors"))
    ids = ref["ids"]
    worst = 0.0
    with torch.no_grad():
        for name, want in sorted(ref.items()):
            if not name.startswith("logits."):
                continue
            loops = int(name.split(".")[1])
            got = model(ids, loops=loops).logits
            err = relative_error(got, want)
            worst = max(worst, err)
            report[f"loops_{loops}"] = err
            if not err <= tolerance:
                fail(f"loops {loops}: relative error {err:.3g} > {tolerance:g}")
        report["max_relative_error"] = worst

        if model.caches_exactly:
            # The cache: a prompt, then one token at a time, against the full forward.
            full = model(ids).logits
            prompt = ids.size(1) // 2
            out = model(ids[:, :prompt], use_cache=True)
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            steps = [out.logits]
            for t in range(prompt, ids.size(1)):
                out = model(ids[:, t:t + 1], use_cache=True,
                            **{("cache" if hasattr(out, "cache") else "past_key_values"): cache})
                steps.append(out.logits)
            err = relative_error(torch.cat(steps, dim=1), full)
            # Then chunks of 3 tokens after a prompt of 5: queries at an offset, several at a
            # time, which take the cache's explicit causal mask.
            out = model(ids[:, :5], use_cache=True)
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            chunks = [out.logits]
            for t in range(5, ids.size(1), 3):
                out = model(ids[:, t:t + 3], use_cache=True,
                            **{("cache" if hasattr(out, "cache") else "past_key_values"): cache})
                chunks.append(out.logits)
            err = max(err, relative_error(torch.cat(chunks, dim=1), full))
            report["cached_vs_full"] = err
            if not err <= tolerance:
                fail(f"cached decoding: relative error {err:.3g} against the full forward")
        with_cache = model.generate(ids[:1, :8], max_new_tokens=12, do_sample=False,
                                    use_cache=True)
        without = model.generate(ids[:1, :8], max_new_tokens=12, do_sample=False,
                                 use_cache=False)
        report["generated"] = with_cache[0, 8:].tolist()
        if not torch.equal(with_cache, without):
            fail(f"greedy tokens differ: {with_cache.tolist()} with the cache, "
                 f"{without.tolist()} without")

    tok_file = os.path.join(directory, "tokenizer_ids.json")
    if os.path.exists(tok_file):
        tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
        report["tokenizer"] = type(tokenizer).__name__
        cases = json.load(open(tok_file, encoding="utf-8"))
        mismatched = 0
        for case in cases:
            got = tokenizer(case["text"], add_special_tokens=False)["input_ids"]
            if got != case["ids"]:
                mismatched += 1
                if mismatched <= 3:
                    fail(f"tokenizer: {case['text'][:40]!r} -> {got[:10]}..., cart: "
                         f"{case['ids'][:10]}...")
        report["texts"] = len(cases)
        report["texts_mismatched"] = mismatched
        if tokenizer.bos_token_id != model.config.bos_token_id:
            fail(f"tokenizer BOS {tokenizer.bos_token_id}, config {model.config.bos_token_id}")
    return report


def main():
    tolerance = float(sys.argv[1])
    reports = [check(d, tolerance) for d in sys.argv[2:]]
    print(json.dumps(reports, indent=1))
    return 1 if any(r["failures"] for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
