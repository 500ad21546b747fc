"""examples/study.ipynb executed headless (nbclient) against a small real study: a cartd with two
CPU workers trains a stage-1 and a stage-2 sweep (d x R, two seeds), then the notebook runs once
over the database file (open_db) and once over gRPC (connect). Any cell error fails the test;
both runs must write the same tables, and its ρ table must equal `cart results pivot`. Run by
tests/python/run.sh."""

import json
import os
import unittest

import nbformat
from nbclient import NotebookClient

import cartlab
import test_cartlab as lab_test

NOTEBOOK = os.path.join(os.environ["CART_SOURCE_DIR"], "examples", "study.ipynb")
OUT = lab_test.OUT


def study_sweep(name, steps, seeds, train, val):
    return {"name": name,
            "base": {"model": "cart", "vocab": 32, "P": 1, "layers": 4, "steps": steps,
                     "seq_len": 16, "batch": 2, "accum": 1, "lr": 3e-3, "warmup": 5,
                     "log_every": 5, "eval_every": steps, "eval_sequences": 8,
                     "checkpoint_every": steps, "threads": 1, "train_data": train,
                     "val_data": {"synth": val}},
            "grid": {"d": [64, 128], "R": [1, 2]}, "seeds": seeds}


class StudyNotebookTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = lab_test.Cluster()
        c = cls.cluster
        c.spawn("cart-worker", ["--server", f"127.0.0.1:{c.grpc}", "--token", lab_test.WORKER_TOKEN,
                                "--device", "cpu", "--worker-id", "testbox-1", "--threads", "1",
                                "--cache-dir", c.file("worker1"), "--acquire-wait-ms", "1000",
                                "--client-config", "/dev/null"], "worker1.log")
        cls.lab = cartlab.connect(config=c.client_yaml)
        lab_test.wait_for("cartd", lambda: lab_test._answers(cls.lab), timeout=30)
        train, val = c.file("train.bin"), c.file("train.val.bin")
        cls.lab.submit(study_sweep("stage2", 40, [1, 2], train, val))
        cls.lab.submit(study_sweep("stage1", 20, [1], train, val))
        lab_test.wait_for("the study to finish", lambda: (
            (runs := cls.lab.runs()).state.eq("SUCCEEDED").all() and len(runs) == 12), timeout=500)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def execute(self, out, env):
        saved = dict(os.environ)
        os.environ.update(env, CARTLAB_OUT=out)
        try:
            nb = nbformat.read(NOTEBOOK, as_version=4)
            # Raises CellExecutionError, naming the cell and the traceback, on any cell error.
            NotebookClient(nb, timeout=300, kernel_name="python3").execute()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        nbformat.write(nb, os.path.join(out, "study.executed.ipynb"))
        return nb

    def test_the_notebook_answers_the_study_the_same_from_the_file_and_from_cartd(self):
        by_file = os.path.join(OUT, "notebook-db")
        by_grpc = os.path.join(OUT, "notebook-grpc")
        nb = self.execute(by_file, {"CARTLAB_DB": self.cluster.file("cartd/cart.db")})
        self.execute(by_grpc, {"CART_CONFIG": self.cluster.client_yaml})
        tables = sorted(f for f in os.listdir(by_file) if f.endswith(".csv"))
        self.assertEqual(tables, ["ppl_by_d_R.csv", "ppl_power_law.csv", "rho_by_d_R.csv",
                                  "stage_ranks.csv"])
        for name in tables:
            with open(os.path.join(by_file, name)) as a, open(os.path.join(by_grpc, name)) as b:
                self.assertEqual(a.read(), b.read(), name)
        for figure in ("rho_heatmap", "ppl_vs_d", "stage_ranks", "loss_bands"):
            self.assertGreater(os.path.getsize(os.path.join(by_file, figure + ".png")), 5000, figure)
        # Every code cell ran, and the plots are in the executed notebook as images.
        code = [c for c in nb.cells if c.cell_type == "code"]
        self.assertTrue(all(c.execution_count for c in code))
        images = sum(1 for c in code for o in c.outputs if "image/png" in o.get("data", {}))
        self.assertEqual(images, 4)

        # The ρ table equals cartd's own pivot (mean over the two seeds) to the last digits.
        pivot = json.loads(self.cluster.cart(["results", "pivot", "--metric", "rho_max", "--rows",
                                              "d", "--cols", "R", "--sweep", "stage2",
                                              "--format", "json"]))
        with open(os.path.join(by_file, "rho_by_d_R.csv")) as f:
            lines = [line.strip().split(",") for line in f if line.strip()]
        self.assertEqual(["R=" + r for r in lines[0][1:]], pivot["columns"][1:])
        self.assertEqual(len(lines) - 1, len(pivot["rows"]))
        for mine, theirs in zip(lines[1:], pivot["rows"]):
            self.assertEqual(mine[0], theirs["cells"][0]["text"])
            for value, cell in zip(mine[1:], theirs["cells"][1:]):
                self.assertEqual(int(cell["n"]), 2)  # both seeds
                self.assertAlmostEqual(float(value), cell["mean"], delta=1e-12 * abs(cell["mean"]))
        with open(os.path.join(by_file, "stage_ranks.csv")) as f:
            self.assertEqual(len(f.read().strip().splitlines()), 1 + 4)  # 4 configs in both stages


if __name__ == "__main__":
    unittest.main()
