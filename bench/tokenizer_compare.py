"""The reference tokenizers on the documents `cart data prepare` tokenized (bench/tokenizer_compare.sh):
ids checked against the token file on every document, then throughput at 1 and N threads.

    tokenizer_compare.py KIND DOCS.jsonl TOKENS.bin TOKENS.json MODEL [THREADS]
        KIND: gpt2 (MODEL: the folder of encoder.json and vocab.bpe; Hugging Face tokenizers and
              tiktoken) or sentencepiece (MODEL: the .model file; the sentencepiece package)

Prints one line per implementation and thread count: MB/s of document text (median of 3)."""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy

KIND, DOCS, BIN, META, MODEL = sys.argv[1:6]
THREADS = int(sys.argv[6]) if len(sys.argv) > 6 else 0  # 0: the parent run, checks and spawns


def documents():
    with open(DOCS, encoding="utf-8") as f:
        return [d for d in (json.loads(line)["text"] for line in f if line.strip()) if d]


def encoders():
    """name -> function(list of texts, threads) -> list of id lists."""
    if KIND == "gpt2":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks

        hf = Tokenizer(models.BPE.from_file(os.path.join(MODEL, "encoder.json"),
                                            os.path.join(MODEL, "vocab.bpe")))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(MODEL, "vocab.bpe"),
                                                os.path.join(MODEL, "encoder.json"))
        gpt2 = tiktoken.Encoding(
            "gpt2-local",
            pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
            mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
        return {
            "tokenizers": lambda docs, n: [e.ids for e in hf.encode_batch(docs,
                                                                        add_special_tokens=False)],
            "tiktoken": lambda docs, n: gpt2.encode_ordinary_batch(docs, num_threads=n),
        }
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=MODEL)
    return {"sentencepiece": lambda docs, n: sp.encode(docs, num_threads=n)}


def framed(ids_per_doc, bos, eos):
    out = []
    for ids in ids_per_doc:
        if bos >= 0:
            out.append(bos)
        out.extend(ids)
        if eos >= 0:
            out.append(eos)
    return numpy.array(out, dtype=numpy.int64)


def main():
    docs = documents()
    size = sum(len(d.encode("utf-8")) for d in docs)
    if THREADS == 0:
        with open(META) as f:
            meta = json.load(f)
        ours = numpy.fromfile(BIN, dtype=meta["dtype"]).astype(numpy.int64)
        for name, encode in encoders().items():
            theirs = framed(encode(docs, 1), meta.get("bos_id", -1), meta.get("eos_id", -1))
            same = len(theirs) == len(ours) and bool((theirs == ours).all())
            where = ""
            if not same:
                n = min(len(theirs), len(ours))
                diff = numpy.nonzero(theirs[:n] != ours[:n])[0]
                where = f" (first difference at token {diff[0] if len(diff) else n})"
            print(f"ids {name}: {'identical' if same else 'DIFFERENT'} to cart's on all "
                  f"{len(docs):,} documents ({len(ours):,} tokens){where}", flush=True)
        return
    # One thread count per process: Rayon (tokenizers) reads RAYON_NUM_THREADS once.
    for name, encode in encoders().items():
        times = []
        for _ in range(3):
            start = time.perf_counter()
            encode(docs, THREADS)
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        print(f"{name} {THREADS} {size / t / 1e6:.3f}", flush=True)


if __name__ == "__main__":
    main()
