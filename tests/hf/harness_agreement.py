# lm-evaluation-harness against `cart eval`, item by item (docs/huggingface.md "The harness and
# cart eval"). A small CART is trained on the State of the Union addresses with a SentencePiece
# tokenizer trained on them too (`cart data tokenizer train`, `cart data prepare`, `cart train`),
# exported with `cart export --format hf`, and scored on task files in the published formats of
# HellaSwag, PIQA (with its labels file), ARC (the AI2 release, gzipped) and LAMBADA, made here
# from other sentences of the same text, some longer than the model's context:
#   - by `cart eval --json --items` (CART Lab's scorer, LibTorch);
#   - by the harness (lm_eval.simple_evaluate, model "hf", trust_remote_code) through
#     hf/python/cart_harness.py, with the harness's own task definitions.
# Both must give the same accuracy and normalized accuracy, and for every item the same choice
# (acc and acc_norm; an item whose two picks are within 2e-4 nats of each other is a tie that
# may break either way, and only such items may differ), each choice's log-likelihood within
# 1e-4 nats, and for LAMBADA the same
# greedy verdicts and perplexity. At a second loop count too (R_infer through the config), and
# with BOS starting every context (cart eval --bos; the harness's add_bos_token).
#
#   python harness_agreement.py BIN_DIR SOURCE_DIR     (exit 77: skipped, no corpus)

import gzip
import json
import math
import os
import random
import subprocess
import sys
import tempfile

TOLERANCE_NATS = 1e-4


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def sentences(text):
    out = []
    for line in text.split("\n"):
        for s in line.replace("? ", ". ").split(". "):
            words = s.strip().split()
            if 6 <= len(words) <= 60 and all(w.isascii() for w in words):
                out.append(" ".join(words))
    return out


def write_tasks(d, sents):
    rng = random.Random(5)
    pick = lambda: rng.choice(sents)
    short = lambda: " ".join(pick().split()[:20])  # a choice: shorter than the context
    with open(os.path.join(d, "hellaswag_val.jsonl"), "w") as f:
        for i in range(24):
            a, b = pick(), pick().split()
            endings = [" ".join(b[3:20])] + [" ".join(pick().split()[3:20]) for _ in range(3)]
            label = rng.randrange(4)
            endings[0], endings[label] = endings[label], endings[0]
            ctx_a = ("[header] " if i % 3 == 0 else "") + a + ("  [title] x." if i % 5 == 0
                                                                else ".")
            f.write(json.dumps({"ind": i, "activity_label": " ".join(a.split()[:2]),
                                "ctx_a": ctx_a, "ctx_b": " ".join(b[:3]).lower(),
                                "ctx": ctx_a + " " + " ".join(b[:3]).lower(),
                                "endings": endings, "source_id": f"s{i}", "split": "val",
                                "split_type": "indomain", "label": label}) + "\n")
    with open(os.path.join(d, "valid.jsonl"), "w") as f, \
            open(os.path.join(d, "valid-labels.lst"), "w") as labels:
        for i in range(24):
            goal = pick() if i % 4 else " ".join([pick(), pick(), pick(), pick()])  # some long
            f.write(json.dumps({"goal": goal, "sol1": short(), "sol2": short()}) + "\n")
            labels.write(f"{rng.randrange(2)}\n")
    with gzip.open(os.path.join(d, "ARC-Easy-Test.jsonl.gz"), "wt") as f:
        for i in range(24):
            n = 3 + i % 3
            keys = "ABCDE" if i % 4 else "12345"
            choices = [{"text": " ".join(pick().split()[:1 + i % 6]), "label": keys[k]}
                       for k in range(n)]
            f.write(json.dumps({"id": f"q{i}", "question": {"stem": pick() + "?",
                                                            "choices": choices},
                                "answerKey": keys[rng.randrange(n)]}) + "\n")
    # LAMBADA: half the passages end "... of the", a target even a small model gets right, so
    # that the greedy verdicts compared are not all "wrong".
    of_the = [s.split(" of the ")[0] + " of the" for s in sents if " of the " in s]
    with open(os.path.join(d, "lambada_test.jsonl"), "w") as f:
        for i in range(24):
            text = rng.choice(of_the) if i % 2 else pick()
            f.write(json.dumps({"text": text if i % 5 else pick() + " " + text}) + "\n")
    return {"hellaswag": ("hellaswag", "hellaswag_val.jsonl"), "piqa": ("piqa", "valid.jsonl"),
            "arc_easy": ("arc", "ARC-Easy-Test.jsonl.gz"),
            "lambada": ("lambada", "lambada_test.jsonl")}


def compare(name, cart, harness, failures):
    fail = lambda m: failures.append(f"{name}: {m}")
    if cart["items"] != harness["items"]:
        return fail(f"{cart['items']} items in cart eval, {harness['items']} in the harness")
    worst = 0.0
    for i, (ours, theirs) in enumerate(zip(cart["item_logprobs"], harness["item_logprobs"])):
        if len(ours) != len(theirs):
            fail(f"item {i}: {len(ours)} choices in cart eval, {len(theirs)} in the harness")
            continue
        worst = max([worst] + [abs(a - b) for a, b in zip(ours, theirs)])
    if worst > TOLERANCE_NATS:
        fail(f"log-likelihoods differ by up to {worst:.3g} nats")
    if cart["kind"] == "lambada":
        greedy = "".join("1" if g[0] else "0" for g in harness["item_greedy"])
        if greedy != cart["item_correct"]:
            fail(f"greedy verdicts {cart['item_correct']} (cart) vs {greedy} (harness)")
        if not math.isclose(cart["perplexity"], harness["perplexity"], rel_tol=1e-5):
            fail(f"perplexity {cart['perplexity']} vs {harness['perplexity']}")
    ties = 0
    if cart["kind"] != "lambada":
        # The same pick for every item, except where the two picks' log-likelihoods are within
        # twice the tolerance of each other: such a tie may break either way in float
        # arithmetic that differs by less than the tolerance (it did on one CPU, by 6e-5 nats).
        pick = [max(range(len(l)), key=lambda k: (l[k], -k)) for l in harness["item_logprobs"]]
        for i, (a, b) in enumerate(zip(cart["item_choice"], pick)):
            if a == b:
                continue
            l = harness["item_logprobs"][i]
            if abs(l[a] - l[b]) <= 2 * TOLERANCE_NATS:
                ties += 1
            else:
                fail(f"item {i}: cart picks {a}, the harness {b} "
                     f"({l[a]:.6f} vs {l[b]:.6f} nats: no tie)")
        # acc_norm and acc may differ by the tied items only.
        if abs(cart["acc_norm"] - harness["acc_norm"]) > ties / cart["items"] + 1e-12:
            fail(f"acc_norm {cart['acc_norm']} vs {harness['acc_norm']} ({ties} tied items)")
    if abs(cart["acc"] - harness["acc"]) > ties / max(cart["items"], 1) + 1e-12:
        fail(f"acc {cart['acc']} vs {harness['acc']} ({ties} tied items)")
    return worst


def main():
    bin_dir, source_dir = sys.argv[1], sys.argv[2]
    cart = os.path.join(bin_dir, "cart")
    sotu = os.path.join(source_dir, "var/corpora/sotu/sotu.txt")
    harness_py = os.path.join(source_dir, "hf/python/cart_harness.py")
    if not os.path.exists(sotu):
        print(f"SKIP: no {sotu}; deploy/fetch-corpora.sh fetches it (make test-deps runs it)")
        return 77
    d = tempfile.mkdtemp(prefix="cart-harness-")
    run([cart, "data", "tokenizer", "train", sotu, "--vocab", "1000", "--max-sentences", "20000",
         "--out", f"{d}/sotu.model"])
    run([cart, "data", "prepare", sotu, "--tokenizer", f"{d}/sotu.model", "--out",
         f"{d}/sotu.bin"])
    with open(f"{d}/run.yaml", "w") as f:
        f.write("vocab: 1000\nd: 64\nP: 1\nR: 2\nsteps: 80\nseq_len: 128\nbatch: 8\nlr: 3e-3\n"
                f"warmup: 5\nlog_every: 20\neval_every: 0\nthreads: 2\ntrain_data: {d}/sotu.bin\n")
    run([cart, "train", f"{d}/run.yaml", "--out", f"{d}/run", "--quiet"])
    run([cart, "export", f"{d}/run", "--format", "hf", "--out", f"{d}/hf"])
    tasks = write_tasks(d, sentences(open(sotu, encoding="utf-8").read()))

    failures, report = [], {}
    # At 2 and 5 loops; and at 2 with BOS starting every context (cart eval --bos, the harness's
    # add_bos_token).
    for loops, bos in ((2, False), (5, False), (2, True)):
        specs = [f"{name}:{kind}={d}/{file}" for name, (kind, file) in tasks.items()]
        out = run([cart, "eval", f"{d}/run", "--json", "--items", "--batch", "3", "--R-infer",
                   str(loops)] + (["--bos"] if bos else [])
                  + sum((["--task", s] for s in specs), []))
        ours = {r["task"]: r for r in json.loads(out) if "task" in r}
        tag = f"{loops}{'-bos' if bos else ''}"
        request = {"model": f"{d}/hf", "output": f"{d}/harness-{tag}.json",
                   "work_dir": f"{d}/harness-work-{tag}", "device": "cpu", "batch_size": 4,
                   "loops": loops, "add_bos_token": bos,
                   "tasks": [{"name": n, "kind": k, "path": f"{d}/{f}"}
                             for n, (k, f) in tasks.items()]}
        with open(f"{d}/request-{tag}.json", "w") as f:
            json.dump(request, f)
        run([sys.executable, harness_py, f"{d}/request-{tag}.json"])
        theirs = {t["name"]: t for t in json.load(open(request["output"]))["tasks"]}
        for name in tasks:
            if ours[name]["bos"] != bos:
                failures.append(f"{name}: cart eval says bos = {ours[name]['bos']}")
            worst = compare(f"{name} at {tag} loops", ours[name], theirs[name], failures)
            report[f"{name}@{tag}"] = {"items": ours[name]["items"], "acc": ours[name]["acc"],
                                         "acc_norm": ours[name].get("acc_norm"),
                                         "max_logprob_diff_nats": worst}
    print(json.dumps(report, indent=1))
    if not any(report[f"lambada@{loops}"]["acc"] > 0 for loops in (2, 5)):
        failures.append("no LAMBADA target is greedy for the model: the comparison of greedy "
                        "verdicts would be vacuous")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
