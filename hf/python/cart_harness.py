# Runs EleutherAI's lm-evaluation-harness on a model directory written by `cart export --format
# hf`, and writes what it scored, item by item, as one JSON file (docs/huggingface.md "The
# harness"). cart-worker runs it for an evaluation job that names lm-eval tasks; the tests run it to
# compare the harness with `cart eval`.
#
#   python cart_harness.py REQUEST.json
#
# REQUEST: {"model": DIR, "output": FILE, "work_dir": DIR, "device": "cpu", "batch_size": 1,
#           "max_length": 0, "add_bos_token": false, "loops": 0,
#           "tasks": [{"name": N, "kind": K, "path": P, "labels": L, "limit": 0}, {"name": N}]}
# A task with a kind and a path is a local file in its published format (CART Lab's task kinds:
# hellaswag, piqa, arc, lambada): it is rewritten in the layout of the harness's Hugging Face
# dataset and scored by the harness's own task definition (its YAML, included), so nothing of the
# harness's prompt, choices or metrics is restated here. A task with a name alone is one of the
# harness's registered tasks, with the data it names (the hub, or a local datasets cache).
#
# OUTPUT: {"lm_eval": version, "transformers": version, "tasks": [{"name", "harness_task",
#          "items", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "perplexity",
#          "item_logprobs": [[per choice]], "item_greedy": [[per choice]], "gold": [per item],
#          "item_acc": [per item], "item_acc_norm": [per item]}]}
# Exit status 2 with a message on stderr for bad input (an unknown task, a missing file); 1 for
# anything else.

import difflib
import gzip
import json
import math
import os
import sys

# The harness's own definitions of the task kinds CART Lab reads, and the split each scores.
HARNESS_TASKS = {
    "hellaswag": ("hellaswag/hellaswag.yaml", "validation"),
    "piqa": ("piqa/piqa.yaml", "validation"),
    "arc": ("arc/arc_easy.yaml", "test"),
    "lambada": ("lambada/lambada_openai.yaml", "test"),
}


class BadInput(Exception):
    pass


def _open(path):
    if not os.path.exists(path):
        raise BadInput(f"{path}: no such file")
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"  # gzip under any name, as CART Lab reads it
    return gzip.open(path, "rt", encoding="utf-8") if gzipped else open(path, encoding="utf-8")


def _rows(path):
    with _open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path}:{number}: not JSON ({e.msg})")


def _piqa_labels(task):
    """The PIQA release's separate labels file: PATH with .jsonl replaced by -labels.lst."""
    path = task.get("labels") or ""
    if not path:
        base = task["path"][:-3] if task["path"].endswith(".gz") else task["path"]
        path = (base[:-6] if base.endswith(".jsonl") else base) + "-labels.lst"
    with _open(path) as f:
        labels = []
        for number, line in enumerate(f, 1):
            if line.strip():
                if line.strip() not in ("0", "1"):
                    raise BadInput(f"{path}:{number}: label {line.strip()!r}; allowed: 0, 1")
                labels.append(int(line))
        return path, labels


def _hub_layout(task):
    """The task's items as rows of the harness's dataset for its kind."""
    kind, path = task["kind"], task["path"]
    rows = []
    labels = None
    for index, (number, row) in enumerate(_rows(path)):
        if kind == "hellaswag":
            if "activity_label" not in row:
                raise BadInput(f"{path}:{number}: no activity_label; the harness's HellaSwag "
                               "prompt starts with it")
            if "ctx_a" in row and "ctx_b" in row:
                ctx_a, ctx_b = row["ctx_a"], row["ctx_b"]
            else:
                ctx_a, ctx_b = row.get("ctx", ""), ""  # the harness joins ctx_a and ctx_b
            rows.append({"ind": index, "activity_label": row["activity_label"],
                         "ctx_a": ctx_a, "ctx_b": ctx_b, "ctx": row.get("ctx", ctx_a),
                         "endings": row["endings"], "source_id": str(row.get("source_id", "")),
                         "split": "val", "split_type": "indomain", "label": str(row["label"])})
        elif kind == "piqa":
            label = row.get("label")
            if label is None:  # the PIQA release: labels in a file of their own
                if labels is None:
                    labels_path, labels = _piqa_labels(task)
                if index >= len(labels):
                    raise BadInput(f"{path}:{number}: no label for this item in {labels_path}")
                label = labels[index]
            rows.append({"goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"],
                         "label": int(label)})
        elif kind == "arc":
            q = row["question"]
            if isinstance(q, dict):  # the AI2 release: question.stem, question.choices[]
                choices = {"text": [c["text"] for c in q["choices"]],
                           "label": [c["label"] for c in q["choices"]]}
                q = q["stem"]
            else:  # the Hugging Face export
                choices = row["choices"]
            rows.append({"id": str(row.get("id", index)), "question": q, "choices": choices,
                         "answerKey": row["answerKey"]})
        elif kind == "lambada":
            rows.append({"text": row["text"]})
        else:
            raise BadInput(f"task {task['name']}: kind {kind!r}; allowed: "
                           + ", ".join(HARNESS_TASKS))
        if task.get("limit") and len(rows) >= task["limit"]:
            break
    if not rows:
        raise BadInput(f"{path}: no items")
    return rows


def _local_task_yaml(task, work_dir, tasks_dir):
    """Writes the item file and a task YAML that includes the harness's own definition."""
    definition, split = HARNESS_TASKS[task["kind"]]
    data = os.path.join(work_dir, f"{task['name']}.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for row in _hub_layout(task):
            f.write(json.dumps(row) + "\n")
    name = f"cart_{task['name']}"
    splits = {"validation": data} if split == "validation" else {"test": data}
    yaml = os.path.join(work_dir, f"{name}.yaml")
    with open(yaml, "w", encoding="utf-8") as f:
        f.write(f"include: {json.dumps(os.path.join(tasks_dir, definition))}\n")
        f.write(f"task: {name}\n")
        f.write("tag: []\n")
        f.write("dataset_path: json\n")
        f.write("dataset_name: null\n")
        f.write(f"dataset_kwargs:\n  data_files: {json.dumps(splits)}\n")
        f.write("training_split: null\n")
        f.write(f"validation_split: {'validation' if split == 'validation' else 'null'}\n")
        f.write(f"test_split: {'test' if split == 'test' else 'null'}\n")
        f.write("fewshot_split: null\n")
    return name


def _registry_entry(manager, name):
    """(kind, output_type) of a registered task, read from its YAML without loading its data;
    (None, None) where this lm-eval keeps them elsewhere (the check is then left to the run)."""
    try:
        from lm_eval.tasks._yaml_loader import load_yaml

        entry = manager.task_index[name]
        kind = entry.kind.name
        if kind != "TASK":
            return kind, None
        return kind, load_yaml(entry.yaml_path, resolve_func=False).get("output_type")
    except Exception:  # noqa: BLE001 - another lm-eval's internals: no pre-check, not an error
        return None, None


def _stderr(values):
    """The standard error of a mean over items (the sample standard deviation over √n), as the
    harness computes it when it bootstraps; None without values."""
    values = [float(v) for v in values if v is not None]
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _loglikelihood(response, name):
    if not isinstance(response, (list, tuple)) or not isinstance(response[0], (int, float)):
        raise BadInput(f"lm-eval task {name!r} answers with text, not log-likelihoods; allowed: "
                       "multiple_choice and loglikelihood tasks")
    return float(response[0])


def _metric(results, key):
    for k, v in results.items():
        if k.split(",")[0] == key and isinstance(v, (int, float)):
            return float(v)
    return None


def run(request):
    if all(task.get("path") for task in request["tasks"]):
        # Local files and a local model need nothing from the hub: never wait on it.
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import lm_eval
    import transformers
    from lm_eval.tasks import TaskManager

    tasks_dir = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    work_dir = request["work_dir"]
    os.makedirs(work_dir, exist_ok=True)
    names = {}  # harness task name -> our name
    for task in request["tasks"]:
        if task.get("path"):
            if task.get("kind") not in HARNESS_TASKS:
                raise BadInput(f"task {task['name']}: kind {task.get('kind')!r}; allowed: "
                               + ", ".join(HARNESS_TASKS))
            names[_local_task_yaml(task, work_dir, tasks_dir)] = task["name"]
        else:
            names[task["name"]] = task["name"]
    manager = TaskManager(include_path=work_dir)
    known = set(manager.all_tasks)
    for harness_name, name in names.items():
        if harness_name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.75)
            raise BadInput(f"lm-eval has no task {name!r}"
                           + (f"; close names: {', '.join(close)}" if close else ""))
        kind, output_type = _registry_entry(manager, harness_name)
        if kind in ("GROUP", "TAG"):
            raise BadInput(f"lm-eval's {name!r} is a {kind.lower()} of tasks; name its tasks")
        # Only what CART Lab stores: accuracy over choices, or a target's log-likelihood.
        if output_type not in (None, "multiple_choice", "loglikelihood"):
            raise BadInput(f"lm-eval task {name!r} is scored by {output_type}; allowed: "
                           "multiple_choice, loglikelihood")
    model_args = {"pretrained": request["model"], "trust_remote_code": True, "dtype": "float32"}
    if request.get("max_length"):
        model_args["max_length"] = int(request["max_length"])
    if request.get("add_bos_token"):
        model_args["add_bos_token"] = True
    if request.get("loops"):
        model_args["R_infer"] = int(request["loops"])  # a config field: the loops at inference
    out = lm_eval.simple_evaluate(
        model="hf", model_args=model_args, tasks=list(names), task_manager=manager,
        batch_size=int(request.get("batch_size") or 1), device=request.get("device") or "cpu",
        log_samples=True, bootstrap_iters=0)
    tasks = []
    for harness_name, name in names.items():
        r = out["results"][harness_name]
        samples = sorted(out["samples"][harness_name], key=lambda s: s["doc_id"])
        tasks.append({
            "name": name,
            "harness_task": harness_name,
            "items": len(samples),
            "acc": _metric(r, "acc"),
            "acc_stderr": _stderr([s.get("acc") for s in samples]),
            "acc_norm": _metric(r, "acc_norm"),
            "acc_norm_stderr": _stderr([s.get("acc_norm") for s in samples]),
            "perplexity": _metric(r, "perplexity"),
            "item_logprobs": [[_loglikelihood(x, name) for x in s["filtered_resps"]]
                              for s in samples],
            "item_greedy": [[bool(x[1]) for x in s["filtered_resps"]] for s in samples],
            "gold": [s["target"] if isinstance(s["target"], int) else None for s in samples],
            "item_acc": [s.get("acc") for s in samples],
            "item_acc_norm": [s.get("acc_norm") for s in samples],
        })
    return {"lm_eval": lm_eval.__version__ if hasattr(lm_eval, "__version__") else None,
            "transformers": transformers.__version__, "tasks": tasks}


def main():
    if len(sys.argv) != 2:
        print("usage: cart_harness.py REQUEST.json", file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            request = json.load(f)
        result = run(request)
    except BadInput as e:
        print(f"cart_harness: {e}", file=sys.stderr)
        return 2
    tmp = request["output"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, request["output"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
