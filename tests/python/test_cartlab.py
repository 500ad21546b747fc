"""cartlab against real programs: a cartd with tokens on loopback ports, a cart-worker training on
the CPU, and the `cart` CLI as the yardstick. runs(), table() and history() must equal what `cart
runs ls`, `cart results` and `cart results series` print (as JSON) to the last digit; submit,
extend, follow and the errors behave as the CLI's do. Run by tests/python/run.sh."""

import http.server
import json
import math
import os
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import numpy
import pandas as pd

import cartlab

BIN = os.environ["CART_BIN_DIR"]
OUT = os.environ.get("CART_TEST_OUT") or tempfile.mkdtemp()
USER_TOKEN = "user-token-python-0123456789"
WORKER_TOKEN = "worker-token-python-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout=180):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


class Cluster:
    def __init__(self):
        self.dir = os.path.join(OUT, "cluster")
        os.makedirs(self.dir, exist_ok=True)
        self.grpc = free_port()
        self.http = free_port()
        tokens = self.file("tokens")
        with open(tokens, "w") as f:
            f.write(f"{USER_TOKEN} user alice\n{WORKER_TOKEN} worker testbox\n")
        os.chmod(tokens, 0o600)
        self.client_yaml = self.file("client.yaml")
        with open(self.client_yaml, "w") as f:
            f.write(f"server: 127.0.0.1:{self.grpc}\ntoken: {USER_TOKEN}\n")
        self.procs = []
        self.logs = []
        self.spawn("cartd", ["--listen", f"127.0.0.1:{self.grpc}", "--http", f"127.0.0.1:{self.http}",
                             "--data-dir", self.file("cartd"), "--tokens", tokens], "cartd.log")
        self.cart(["data", "synth", "--vocab", "32", "--tokens", "60000", "--val-tokens", "2000",
                   "--out", self.file("train.bin")])
        self.spawn("cart-worker", ["--server", f"127.0.0.1:{self.grpc}", "--token", WORKER_TOKEN,
                                   "--device", "cpu", "--worker-id", "testbox-0", "--threads", "1",
                                   "--cache-dir", self.file("worker"), "--acquire-wait-ms", "1000",
                                   "--peak-tflops", "1", "--client-config", "/dev/null"],
                   "worker.log")

    def file(self, name):
        return os.path.join(self.dir, name)

    def spawn(self, exe, args, log):
        out = open(self.file(log), "w")
        self.logs.append(out)
        self.procs.append(subprocess.Popen([os.path.join(BIN, exe), *args], stdout=out, stderr=out))

    def cart(self, args):
        env = dict(os.environ, CART_CONFIG=self.client_yaml)
        done = subprocess.run([os.path.join(BIN, "cart"), *args], env=env, capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            raise AssertionError(f"cart {' '.join(args)}: {done.stderr}")
        return done.stdout

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()


def sweep(name, steps=30):
    return {"name": name,
            "base": {"model": "cart", "vocab": 32, "d": 64, "P": 1, "layers": 4, "steps": steps,
                     "seq_len": 16, "batch": 2, "accum": 1, "lr": 3e-3, "warmup": 5,
                     "log_every": 5, "eval_every": 0, "checkpoint_every": 10, "threads": 1,
                     "train_data": CLUSTER.file("train.bin")},
            "grid": {"R": [1, 2]}, "seeds": [1, 2]}


CLUSTER = None


def _answers(lab):
    try:
        lab.sweeps()
        return True
    except cartlab.CartError:
        return False


def setUpModule():
    global CLUSTER
    CLUSTER = Cluster()


def tearDownModule():
    CLUSTER.stop()


class CartlabTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = cartlab.connect(config=CLUSTER.client_yaml)
        wait_for("cartd", lambda: _answers(cls.lab), timeout=30)
        cls.submitted = cls.lab.submit(sweep("py"), cart=os.path.join(BIN, "cart"))
        wait_for("the sweep to finish", lambda: (cls.lab.runs(sweep="py").state == "SUCCEEDED").all()
                 and len(cls.lab.runs(sweep="py")) == 4, timeout=400)

    def test_submit_returns_the_expanded_runs(self):
        self.assertEqual(self.submitted["sweep"], "py")
        self.assertFalse(self.submitted["existing"])
        runs = self.submitted["runs"]
        self.assertEqual(sorted(runs["name"]), ["py/0", "py/1", "py/2", "py/3"])
        self.assertEqual(sorted(set(runs["R"])), [1, 2])

    def test_budgets_show_spent_and_left_and_only_an_admin_sets_one(self):
        spec = sweep("pybudget", steps=5)
        spec.update({"grid": {"R": [1]}, "seeds": [1], "budget_device_hours": 100})
        self.lab.submit(spec, cart=os.path.join(BIN, "cart"))
        wait_for("the budgeted sweep to finish",
                 lambda: (self.lab.runs(sweep="pybudget").state == "SUCCEEDED").all(), timeout=300)
        budgets = self.lab.budgets()
        row = budgets[(budgets.scope == "sweep") & (budgets.name == "pybudget")].iloc[0]
        self.assertEqual(row["limit"], 100)
        self.assertGreater(row["spent"], 0)
        self.assertEqual(row["held"], 0)
        self.assertAlmostEqual(row["left"], 100 - row["spent"])
        sweeps = self.lab.sweeps()
        mine = sweeps[sweeps.name == "pybudget"].iloc[0]
        self.assertEqual(mine["budget"], 100)
        self.assertAlmostEqual(mine["budget_left"], row["left"])
        self.assertAlmostEqual(mine["device_hours"], row["spent"])
        self.assertTrue(pd.isna(sweeps[sweeps.name == "py"].iloc[0]["budget"]))
        with self.assertRaises(cartlab.CartError) as denied:
            self.lab.set_budget(200, sweep="pybudget")
        self.assertEqual(denied.exception.code, "PERMISSION_DENIED")
        self.assertIn("admin", denied.exception.message)
        with self.assertRaises(ValueError):
            self.lab.set_budget(200)

    def test_data_shows_the_training_file_bound_at_submit(self):
        with open(CLUSTER.file("train.json"), encoding="utf-8") as f:
            meta = json.load(f)
        data = self.lab.data("py/0")
        self.assertEqual(list(data["role"]), ["train"])
        row = data.iloc[0]
        self.assertEqual(row["path"], CLUSTER.file("train.bin"))
        self.assertEqual(row["sha256"], meta["sha256"])
        self.assertEqual(row["tokens"], meta["tokens"])
        self.assertEqual(row["recorded_by"], "submit")
        self.assertFalse(pd.isna(row["recorded_at"]))

    def test_runs_equal_cart_runs_ls_to_the_last_digit(self):
        frame = self.lab.runs(sweep="py")
        cli = json.loads(CLUSTER.cart(["runs", "ls", "--sweep", "py", "--json"]))["runs"]
        self.assertEqual(list(frame["run_id"]), [int(r["run_id"]) for r in cli])
        for (_, row), view in zip(frame.iterrows(), cli):
            self.assertEqual(row["name"], view["name"])
            self.assertEqual(row["state"], view["state"].removeprefix("RUN_STATE_"))
            self.assertEqual(row["step"], int(view["step"]))
            self.assertEqual(row["worker_id"], view["worker_id"])
            for key, text in view["params"].items():
                self.assertEqual(row[key], cartlab._client._typed(text), key)
            self.assertTrue(view["latest"], "the run logged metrics")
            for metric, value in view["latest"].items():
                self.assertEqual(row["latest." + metric], value, metric)  # exact, not approximate
        self.assertEqual(frame["d"].dtype.kind, "i")  # config numbers are numbers
        self.assertIn("latest.rho_max", frame.columns)

    def test_where_filters_by_config_and_names_unknown_keys(self):
        two = self.lab.runs(sweep="py", where={"R": 2})
        self.assertEqual(sorted(two["name"]), sorted(
            self.lab.runs(sweep="py").query("R == 2")["name"]))
        self.assertEqual(len(two), 2)
        with self.assertRaises(KeyError) as e:
            self.lab.runs(sweep="py", where={"RR": 2})
        self.assertIn("no run has config key 'RR'", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.lab.runs(state="DONE")
        self.assertIn("unknown run state 'DONE' (known: QUEUED", str(e.exception))

    def test_history_equals_cart_results_series_point_for_point(self):
        runs = self.lab.runs(sweep="py")
        history = self.lab.history(runs, ["loss", "rho_max"])
        self.assertEqual(set(history["metric"]), {"loss", "rho_max"})
        self.assertEqual(history["wall_time"].isna().sum(), 0)
        for run_id in runs["run_id"]:
            for metric in ("loss", "rho_max"):
                mine = history[(history.run_id == run_id) & (history.metric == metric)]
                cli = json.loads(CLUSTER.cart(["results", "series", "--run", str(run_id),
                                               "--metric", metric, "--format", "json"]))
                steps = [row["cells"][0]["mean"] for row in cli["rows"]]
                values = [row["cells"][1]["mean"] for row in cli["rows"]]
                self.assertEqual(list(mine["step"]), steps)
                self.assertEqual(list(mine["value"]), values)  # every digit
        # Downsampled by cartd: the buckets' means, as `cart results series` gives them.
        coarse = self.lab.history(runs["run_id"].iloc[0], "loss", buckets=2)
        self.assertEqual(len(coarse), 2)

    def test_table_equals_cart_results_pivot_to_the_last_digit(self):
        # A pivot of one run per cell, and the deltas of R's groups over two seeds each (whose
        # cells carry the 95 % interval of their mean).
        spread = 0
        for kind, args, flags in (
                ("pivot", dict(metric="loss", rows="R", cols="seed"),
                 ["--metric", "loss", "--rows", "R", "--cols", "seed"]),
                ("deltas", dict(metric="loss", baseline="R=1", group_by="R"),
                 ["--metric", "loss", "--baseline", "R=1", "--group-by", "R"])):
            mine = self.lab.table(kind, **args)
            cli = json.loads(CLUSTER.cart(["results", kind] + flags + ["--format", "json"]))
            self.assertEqual(list(mine.columns), cli["columns"])
            self.assertEqual(len(mine), len(cli["rows"]))
            for i, row in enumerate(cli["rows"]):
                for j, cell in enumerate(row["cells"]):
                    if cell.get("text"):
                        self.assertEqual(mine.iat[i, j], cell["text"])
                        continue
                    n = int(cell.get("n", 0))
                    self.assertEqual(mine.iat[i, j], cell.get("mean", 0.0))
                    self.assertEqual(mine.attrs["n"].iat[i, j], n)
                    self.assertEqual(mine.attrs["std"].iat[i, j], cell.get("std", 0.0))
                    for end in ("ci_low", "ci_high"):  # the 95 % interval: two runs or more
                        if n > 1:
                            self.assertEqual(mine.attrs[end].iat[i, j], cell[end])
                        else:
                            self.assertTrue(math.isnan(mine.attrs[end].iat[i, j]))
                    if n > 1:
                        spread += 1
                        self.assertLess(cell["ci_low"], cell["mean"])
                        self.assertGreater(cell["ci_high"], cell["mean"])
        self.assertGreater(spread, 0, "no cell averaged two seeds")

    def test_attempts_and_diff_equal_the_cli_and_submit_records_provenance(self):
        cart = os.path.join(BIN, "cart")
        # One row per attempt with what its worker recorded, as `cart runs show --json` has it.
        runs = self.lab.runs(sweep="py")
        attempts = self.lab.attempts(runs)
        self.assertEqual(sorted(attempts["run_id"]), sorted(runs["run_id"]))
        for _, row in attempts.iterrows():
            shown = json.loads(CLUSTER.cart(["runs", "show", str(row["run_id"]), "--json"]))
            first = shown["attempts"][0]
            self.assertEqual(row["worker_id"], first["worker_id"])
            self.assertEqual(row["device_class"], first["device_class"])
            for item in first["environment"]:
                self.assertEqual(row[item["key"]], item["value"], item["key"])
            self.assertEqual(row["device_class"], row["device.name"])  # a CPU worker: its model
        self.assertEqual(list(runs["device_classes"]), [[c] for c in attempts["device_class"]])
        db = cartlab.open_db(CLUSTER.file("cartd/cart.db"))
        pd.testing.assert_frame_equal(db.attempts(runs), attempts)
        db.close()

        # diff(): `cart runs diff --json`, its tables as frames.
        d = self.lab.diff("py/0", "py/1", cart=cart)
        cli = json.loads(CLUSTER.cart(["runs", "diff", "py/0", "py/1", "--json"]))
        self.assertEqual(d["config"].to_dict("records"), cli["config"])
        self.assertEqual(list(d["config"]["key"]), ["seed"])
        self.assertEqual(d["series"], cli["series"])
        self.assertIsNotNone(d["series"]["first_different_step"])
        self.assertEqual(d["a"]["device_classes"], runs["device_classes"].iloc[0])
        same = self.lab.diff("py/0", "py/0", cart=cart)
        self.assertTrue(same["config"].empty and same["environment"].empty)
        self.assertIsNone(same["series"]["first_different_step"])

        # submit()'s provenance: a dict says it came from Python; a file is read by `cart sweep
        # provenance`, path and sha256 as `cart sweep submit` records them.
        self.assertIn("a dict given to cartlab's submit()", CLUSTER.cart(["sweep", "show", "py"]))
        path = CLUSTER.file("prov.yaml")
        spec = sweep("prov", steps=10)
        spec["grid"], spec["seeds"] = {"R": [1]}, [1]
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(spec))  # JSON is YAML
        self.lab.submit(path, cart=cart)
        self.lab.cancel("prov/0", reason="only its provenance is wanted")
        wait_for("prov/0 to end", lambda: self.lab.runs(sweep="prov").state.iloc[0]
                 in ("CANCELLED", "SUCCEEDED"), timeout=120)
        with open(path, "rb") as f:
            sha = __import__("hashlib").sha256(f.read()).hexdigest()
        shown = CLUSTER.cart(["sweep", "show", "prov"])
        self.assertIn(f"file.sha256: {sha}", shown)
        self.assertIn(f"file.path: {path}", shown)
        self.assertIn("git", shown)

    def test_plan_is_cart_plan_from_cartd_and_from_the_file_alike(self):
        cart = os.path.join(BIN, "cart")
        # The py sweep holds no part of the study: every claim cannot tell, none can be planned.
        frame = self.lab.plan(cart=cart, sweeps={"stage2": "py"})
        cli = json.loads(CLUSTER.cart(["plan", "--json", "--stage2", "py"]))
        self.assertEqual(sorted(set(frame["claim"])), sorted(c["claim"] for c in cli))
        self.assertFalse(frame["planned"].any())
        db = cartlab.open_db(CLUSTER.file("cartd/cart.db"))
        pd.testing.assert_frame_equal(db.plan(cart=cart, sweeps={"stage2": "py"}), frame)
        db.close()
        with self.assertRaises(cartlab.CartError) as e:
            self.lab.plan(power=1.5, cart=cart)
        self.assertIn("power 1.5 is outside (0, 1)", e.exception.message)
        # Nothing can be planned, so applying queues nothing and records no plan.
        applied = self.lab.apply_plan(cart=cart, sweeps={"stage2": "py"})
        self.assertEqual(applied["plan_id"], 0)
        self.assertEqual(len(applied["runs"]), 0)
        self.assertEqual(list(applied["runs"].columns),
                         ["run_id", "sweep", "name", "seed", "kind", "parent_run_id"])
        with self.assertRaises(cartlab.CartError) as e:
            self.lab.apply_plan(budget=-1, cart=cart)
        self.assertIn("--budget -1 must be a number of RTX 3090 hours >= 0", e.exception.message)

    def test_eval_items_are_the_items_an_evaluation_job_scored(self):
        # A byte-level run that learns four facts, then an evaluation at 1 and 2 loops on them
        # in LAMBADA's and PIQA's formats: each item's outcome, from cartd and from the file.
        eats = [("cat", "fish"), ("dog", "meat"), ("cow", "grass"), ("bird", "seeds")]
        with open(CLUSTER.file("eats.txt"), "w") as f:
            for i in range(400):
                a, food = eats[(i * 7) % 4]
                f.write(f"the {a} eats {food}.\n")
        with open(CLUSTER.file("lambada_test.jsonl"), "w") as f:
            for a, food in eats:
                f.write(json.dumps({"text": f"the {a} eats {food}"}) + "\n")
        with open(CLUSTER.file("valid.jsonl"), "w") as f:
            for i, (a, food) in enumerate(eats):
                f.write(json.dumps({"goal": f"the {a} eats", "sol1": eats[(i + 1) % 4][1],
                                    "sol2": food}) + "\n")
        with open(CLUSTER.file("valid-labels.lst"), "w") as f:
            f.write("1\n" * 4)
        CLUSTER.cart(["data", "prepare", CLUSTER.file("eats.txt"), "--format", "lines",
                      "--out", CLUSTER.file("eats.bin")])
        spec = {"name": "items",
                "base": {"vocab": 258, "d": 64, "P": 1, "R": 2, "seq_len": 32, "batch": 4,
                         "lr": 1e-2, "warmup": 3, "eval_every": 0, "threads": 1, "steps": 20,
                         "checkpoint_every": 20, "train_data": CLUSTER.file("eats.bin"),
                         "tasks": {"lambada": "lambada=" + CLUSTER.file("lambada_test.jsonl"),
                                   "piqa": "piqa=" + CLUSTER.file("valid.jsonl")}},
                "seeds": [1],
                "derived": [{"name": "varR", "from": {"run": 0, "checkpoint": "final"},
                             "eval_loops": [1, 2]}]}
        self.lab.submit(spec, cart=os.path.join(BIN, "cart"))
        wait_for("the evaluation", lambda: (self.lab.runs(sweep="items").state
                                            == "SUCCEEDED").all(), timeout=300)
        runs = self.lab.runs(sweep="items")
        evaluation = int(runs[runs["name"] == "items/1"]["run_id"].iloc[0])
        items = self.lab.eval_items(evaluation)
        self.assertEqual(list(items.columns), ["run_id", "task", "loops", "item", "correct",
                                               "correct_norm", "logprob"])
        self.assertEqual(len(items), 16)  # 4 items of 2 tasks at 2 loop counts
        history = self.lab.history(evaluation, ["task_acc/lambada", "task_ppl/lambada",
                                                "task_acc/piqa"])
        for (task, loops), group in items.groupby(["task", "loops"]):
            self.assertEqual(list(group["item"]), [0, 1, 2, 3])
            acc = history[(history.metric == f"task_acc/{task}") & (history.step == loops)]
            self.assertAlmostEqual(group["correct"].mean(), acc["value"].iloc[0], places=12)
            if task == "lambada":
                ppl = history[(history.metric == "task_ppl/lambada") & (history.step == loops)]
                self.assertAlmostEqual(float(numpy.exp(-group["logprob"].mean())),
                                       ppl["value"].iloc[0], places=9)
                self.assertTrue(group["correct_norm"].isna().all())
            else:
                self.assertTrue(group["logprob"].isna().all())
                self.assertEqual(group["correct_norm"].map(type).tolist(), [bool] * 4)
        db = cartlab.open_db(CLUSTER.file("cartd/cart.db"))
        pd.testing.assert_frame_equal(db.eval_items(evaluation), items)
        db.close()

    def test_open_db_reads_the_same_frames_without_cartd(self):
        db = cartlab.open_db(CLUSTER.file("cartd/cart.db"))
        runs = self.lab.runs(sweep="py")
        # The expected finish is cartd's plan; every run here is finished, so it is NaT in both.
        pd.testing.assert_frame_equal(db.runs(sweep="py"), runs)
        pd.testing.assert_frame_equal(db.runs(sweep="py", where={"R": 1}),
                                      self.lab.runs(sweep="py", where={"R": 1}))
        pd.testing.assert_frame_equal(db.history(runs, ["loss", "rho_max"]),
                                      self.lab.history(runs, ["loss", "rho_max"]))
        pd.testing.assert_frame_equal(db.history("py/1"), self.lab.history("py/1"))
        mine, theirs = db.sweeps(), self.lab.sweeps()
        pd.testing.assert_frame_equal(mine.drop(columns=["expected_finish", "runs_estimated"]),
                                      theirs.drop(columns=["expected_finish", "runs_estimated"]))
        # Results tables over the file: `cart results --db`, cartd's own queries, the same frame.
        cart = os.path.join(BIN, "cart")
        for kind, args in (("pivot", dict(metric="loss", rows="R", cols="seed")),
                           ("best", dict(metric="loss", rows="R", cols="seed",
                                         lower_is_better=True)),
                           ("series", dict(metric="rho_max", run="py/2"))):
            mine, theirs = db.table(kind, cart=cart, **args), self.lab.table(kind, **args)
            pd.testing.assert_frame_equal(mine, theirs)
            self.assertEqual(mine.attrs["title"], theirs.attrs["title"])
            pd.testing.assert_frame_equal(mine.attrs["std"], theirs.attrs["std"])
            pd.testing.assert_frame_equal(mine.attrs["n"], theirs.attrs["n"])
            pd.testing.assert_frame_equal(mine.attrs["ci_low"], theirs.attrs["ci_low"])
            pd.testing.assert_frame_equal(mine.attrs["ci_high"], theirs.attrs["ci_high"])
        with self.assertRaises(cartlab.CartError) as e:
            db.table("pivot", metric="loss", rows="RR", cols="seed", cart=cart)
        self.assertIn("'RR'", e.exception.message)
        with self.assertRaises(cartlab.CartError) as e:
            db.cancel("py/0")
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        self.assertIn("read-only", e.exception.message)
        with self.assertRaises(FileNotFoundError):
            cartlab.open_db(os.path.join(OUT, "nowhere.db"))
        db.close()

    def test_tensorboard_export_reads_back_with_tensorboards_own_reader(self):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        out = os.path.join(OUT, "tensorboard")
        printed = CLUSTER.cart(["export-metrics", "py", "--format", "tensorboard", "--out", out])
        self.assertIn("of 4 runs to", printed)
        runs = self.lab.runs(sweep="py")
        history = self.lab.history(runs)
        for run_id, name in zip(runs["run_id"], runs["name"]):
            folder = os.path.join(out, name)
            files = [f for f in os.listdir(folder) if f.startswith("events.out.tfevents.")]
            self.assertEqual(len(files), 1, folder)
            acc = EventAccumulator(folder, size_guidance={"scalars": 0})
            acc.Reload()
            mine = history[history.run_id == run_id]
            self.assertEqual(sorted(acc.Tags()["scalars"]), sorted(set(mine["metric"])))
            for metric, points in mine.groupby("metric"):
                events = acc.Scalars(metric)
                self.assertEqual([e.step for e in events], list(points["step"]), metric)
                # TensorBoard keeps scalars as 32-bit floats; steps and wall times exactly.
                self.assertEqual([e.value for e in events],
                                 [float(numpy.float32(v)) for v in points["value"]], metric)
                self.assertEqual([round(e.wall_time * 1e6) for e in events],
                                 [int(t.value // 1000) for t in points["wall_time"]], metric)
        with self.assertRaises(AssertionError) as e:
            CLUSTER.cart(["export-metrics", "nosuch", "--out", out])
        self.assertIn("no run or sweep 'nosuch'", str(e.exception))

    def test_tags_and_notes_round_trip_filter_and_equal_the_cli(self):
        runs = self.lab.runs(sweep="py")
        first, second = runs["name"].iloc[0], runs["name"].iloc[1]
        first_id = int(runs["run_id"].iloc[0])
        try:
            self.assertEqual(self.lab.tag(first, "leak", "rerun"), ["leak", "rerun"])
            printed = CLUSTER.cart(["runs", "tag", second, "leak"])  # the CLI, by name
            self.assertIn(f"run {second}: tags leak", printed)
            note = self.lab.note(first, "val overlap: rerun with the fixed split\n\tsee #12")
            self.assertEqual(note["text"], "val overlap: rerun with the fixed split\n\tsee #12")
            self.assertEqual(note["who"], "user:alice")
            self.assertIsInstance(note["at"], pd.Timestamp)
            self.assertEqual(self.lab.note(first)["text"], note["text"])  # read, unchanged
            # runs() carries them; where={"tag": ...} is cartd's filter, as `cart runs ls --tag`.
            row = self.lab.runs(sweep="py").set_index("name").loc[first]
            self.assertEqual(row["tags"], ["leak", "rerun"])
            self.assertEqual(row["note"], note["text"])
            tagged = self.lab.runs(where={"tag": "leak"})
            self.assertEqual(sorted(tagged["name"]), sorted([first, second]))
            cli = json.loads(CLUSTER.cart(["runs", "ls", "--tag", "leak", "--json"]))["runs"]
            self.assertEqual([int(r["run_id"]) for r in cli], list(tagged["run_id"]))
            both = self.lab.runs(sweep="py", where={"tag": ["leak", "rerun"]})
            self.assertEqual(list(both["name"]), [first])
            r_value = int(row["R"])
            self.assertEqual(list(self.lab.runs(where={"tag": "leak", "R": r_value})["name"]),
                             list(tagged[tagged.R == r_value]["name"]))
            shown = CLUSTER.cart(["runs", "show", str(first_id)])
            self.assertIn("tag: leak (user:alice,", shown)
            self.assertIn("val overlap: rerun with the fixed split", shown)
            # A results table over the tagged runs only, equal to `cart results pivot --tag`.
            mine = self.lab.table("pivot", metric="loss", rows="R", cols="seed", tags=["leak"])
            theirs = json.loads(CLUSTER.cart(["results", "pivot", "--metric", "loss", "--rows",
                                              "R", "--cols", "seed", "--tag", "leak",
                                              "--format", "json"]))
            self.assertEqual(int(mine.attrs["n"].to_numpy().sum()), 2)
            self.assertEqual(len(mine), len(theirs["rows"]))
            # A sweep's own tags and note, from Python and from the CLI's file.
            self.assertEqual(self.lab.tag("py", "stage1"), ["stage1"])
            note_file = os.path.join(OUT, "sweep-note.txt")
            with open(note_file, "w") as f:
                f.write("the first stage")
            CLUSTER.cart(["sweep", "note", "py", "--file", note_file])
            sweep = self.lab.sweeps().set_index("name").loc["py"]
            self.assertEqual(sweep["tags"], ["stage1"])
            self.assertEqual(sweep["note"], "the first stage")
            # The database file gives the same frames, filter included.
            db = cartlab.open_db(CLUSTER.file("cartd/cart.db"))
            pd.testing.assert_frame_equal(db.runs(sweep="py"), self.lab.runs(sweep="py"))
            pd.testing.assert_frame_equal(db.runs(where={"tag": "leak"}), tagged)
            mine, theirs = db.sweeps(), self.lab.sweeps()
            pd.testing.assert_frame_equal(mine.drop(columns=["expected_finish", "runs_estimated"]),
                                          theirs.drop(columns=["expected_finish", "runs_estimated"]))
            db.close()
            # Refusals carry cartd's code and words.
            with self.assertRaises(cartlab.CartError) as e:
                self.lab.tag(first, "bad tag")
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn("tag 'bad tag' must be 1..64 letters", e.exception.message)
            with self.assertRaises(cartlab.CartError) as e:
                self.lab.note(first, "x" * 9000)
            self.assertIn("at most 8192 bytes", e.exception.message)
            with self.assertRaises(cartlab.CartError) as e:
                self.lab.tag("nosuchsweep", "x")
            self.assertEqual(e.exception.code, "NOT_FOUND")
        finally:
            self.lab.untag(first, "leak", "rerun")
            self.lab.untag(second, "leak")
            self.lab.untag("py", "stage1")
            self.lab.note(first, "")
            self.lab.note("py", "")
        self.assertEqual(len(self.lab.runs(where={"tag": "leak"})), 0)

    def test_report_runs_cart_report_from_cartd_and_from_the_file_alike(self):
        cart = os.path.join(BIN, "cart")
        by_grpc = self.lab.report(os.path.join(OUT, "report-grpc"), plots=False,
                                  sweeps={"stage2": "py"}, cart=cart)
        db = cartlab.open_db(CLUSTER.file("cartd/cart.db"))
        by_file = db.report(os.path.join(OUT, "report-db"), plots=False,
                            sweeps={"stage2": "py"}, cart=cart)
        db.close()
        with open(by_grpc["markdown"]) as f:
            markdown = f.read()
        self.assertIn("ρ", markdown)
        tables = sorted(os.listdir(by_grpc["tables"]))
        self.assertTrue(tables, "the report wrote its tables")
        self.assertEqual(tables, sorted(os.listdir(by_file["tables"])))
        for name in tables:
            with open(os.path.join(by_grpc["tables"], name)) as a, \
                    open(os.path.join(by_file["tables"], name)) as b:
                self.assertEqual(a.read(), b.read(), name)
        with self.assertRaises(ValueError):
            self.lab.report(OUT, sweeps={"stage3": "py"}, cart=cart)
        # cart's own refusal comes back as a CartError with its words.
        blocker = os.path.join(OUT, "report-blocker")
        with open(blocker, "w") as f:
            f.write("a file where the report's folder would go")
        with self.assertRaises(cartlab.CartError) as e:
            self.lab.report(os.path.join(blocker, "report"), cart=cart, plots=False)
        self.assertIn("report-blocker", e.exception.message)
        self.assertEqual(self.lab.metric_names("py/1"),
                         sorted(self.lab.history("py/1")["metric"].unique()))

    def test_sweeps_show_the_counts_by_state(self):
        sweeps = self.lab.sweeps()
        row = sweeps[sweeps.name == "py"].iloc[0]
        self.assertEqual(row["runs"], 4)
        self.assertEqual(row["SUCCEEDED"], 4)
        self.assertIsInstance(row["created"], pd.Timestamp)

    def test_extend_then_follow_until_the_run_ends(self):
        run = "py/0"
        # A third more steps with the cosine stretched would jump the rate: cartd asks first.
        with self.assertRaises(cartlab.CartError) as refused:
            self.lab.extend(run, 40)
        self.assertEqual(refused.exception.code, "FAILED_PRECONDITION")
        self.assertIn("--schedule hold", str(refused.exception))
        with self.assertRaises(ValueError):
            self.lab.extend(run, 40, schedule="warm")
        # Requeued; the waiting worker may have taken it before the answer was made.
        self.assertIn(self.lab.extend(run, 40, schedule="hold"), ("QUEUED", "LEASED", "RUNNING"))
        points = list(self.lab.follow(run, "loss", from_step=31))
        self.assertEqual([p["step"] for p in points], [35, 40])
        self.assertEqual(self.lab.runs(sweep="py").set_index("name").loc[run, "state"], "SUCCEEDED")
        with self.assertRaises(cartlab.CartError) as e:
            self.lab.resume(run)
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")

    def test_a_subscription_delivers_to_its_webhook_and_never_shows_its_secret(self):
        got = []

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((self.path, self.headers["Idempotency-Key"], json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_port}/hooks/T0/B0/XSECRET"
            sub = self.lab.subscribe(["failed", "lost"], webhook=url, sweep="py")
            self.assertEqual(sub["events"], ["failed", "lost"])
            self.assertEqual(sub["target"], f"http://127.0.0.1:{server.server_port}/…")
            listed = self.lab.subscriptions()
            self.assertIn(sub["id"], list(listed.id))
            self.assertNotIn("XSECRET", listed.to_string())
            self.assertNotIn("XSECRET", CLUSTER.cart(["notify", "ls"]))
            self.lab.send_test(sub["id"])
            wait_for("the test notification", lambda: (
                self.lab.notifications(sub["id"]).state == "DELIVERED").any(), timeout=30)
            log = self.lab.notifications(sub["id"])
            self.assertEqual(list(log.event), ["test"])
            self.assertEqual(list(log.last_try), ["HTTP 204"])
            self.assertEqual(len(got), 1)
            path, key, body = got[0]
            self.assertEqual(path, "/hooks/T0/B0/XSECRET")
            self.assertEqual(key, log.idempotency_key[0])
            self.assertEqual(body["event"], "test")
            self.lab.unsubscribe(sub["id"])
            self.assertNotIn(sub["id"], list(self.lab.subscriptions().id))
            with self.assertRaises(cartlab.CartError) as e:
                self.lab.subscribe("failed,melted", webhook=url)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn("unknown event 'melted'", e.exception.message)
        finally:
            server.shutdown()

    def test_errors_carry_the_grpc_code_and_cartds_message(self):
        with self.assertRaises(cartlab.CartError) as e:
            self.lab.cancel(987654)
        self.assertEqual(e.exception.code, "NOT_FOUND")
        bad = os.path.join(CLUSTER.dir, "bad.yaml")
        with open(bad, "w") as f:
            f.write("name: bad\nbase:\n  d: 64\n  colour: red\n")
        with self.assertRaises(cartlab.CartError) as e:
            self.lab.submit(bad)
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        self.assertIn("bad.yaml:4", e.exception.message)
        self.assertIn("colour", e.exception.message)
        nobody = cartlab.connect(server=f"127.0.0.1:{free_port()}", token="x", timeout=2)
        with self.assertRaises(cartlab.CartError) as e:
            nobody.sweeps()
        self.assertIn(e.exception.code, ("UNAVAILABLE", "DEADLINE_EXCEEDED"))
        wrong = cartlab.connect(config=CLUSTER.client_yaml, token="not-a-token")
        with self.assertRaises(cartlab.CartError) as e:
            wrong.sweeps()
        self.assertEqual(e.exception.code, "UNAUTHENTICATED")


class ConfigTest(unittest.TestCase):
    def test_arguments_over_environment_over_file(self):
        path = os.path.join(OUT, "client-precedence.yaml")
        with open(path, "w") as f:
            f.write("server: file:1\ntoken: from-file\ntls_server_name: lab\n")
        old = dict(os.environ)
        try:
            os.environ.pop("CART_SERVER", None)
            os.environ.pop("CART_TOKEN", None)
            self.assertEqual(cartlab._config.resolve(config=path).server, "file:1")
            os.environ["CART_SERVER"] = "env:2"
            resolved = cartlab._config.resolve(config=path)
            self.assertEqual((resolved.server, resolved.token, resolved.tls_server_name),
                             ("env:2", "from-file", "lab"))
            self.assertEqual(cartlab._config.resolve(server="arg:3", config=path).server, "arg:3")
            os.environ["CART_CONFIG"] = path
            self.assertEqual(cartlab.default_config_path(), path)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_a_bad_file_is_refused_naming_file_line_and_key(self):
        with self.assertRaises(cartlab.ConfigError) as e:
            cartlab.parse_client_config("server: a:1\n\nport: 7\n", "client.yaml")
        self.assertEqual(str(e.exception),
                         "client.yaml:3: unknown key 'port' (known: server, token, tls_ca, "
                         "tls_server_name)")
        with self.assertRaises(cartlab.ConfigError) as e:
            cartlab.parse_client_config("server: [a, b]\n", "c.yaml")
        self.assertEqual(str(e.exception), "c.yaml:1: server: expected a single value")


if __name__ == "__main__":
    unittest.main()
