"""A cartd's database file read directly, read-only: the same frames as the gRPC Client, with no
daemon (a copied database, a finished study). Writes are cartd's alone: the actions raise."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Union

import pandas as pd
from google.protobuf import json_format

from . import _client
from ._errors import CartError
from ._proto.cart.v1 import common_pb2, scheduler_pb2

_KIND = {"train": common_pb2.JOB_KIND_TRAIN, "eval": common_pb2.JOB_KIND_EVAL}


class Database:
    """`cartlab.open_db(path)`: sweeps(), runs(), history() and metric_names() over a database file,
    as the Client gives them (the placement plan's expected finish aside: that is cartd's, so it is
    NaT); table() and report() through the `cart` program's --db."""

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{self.path}: no such database file")
        # mode=ro: never written; a cartd may be writing it meanwhile (WAL readers do not block it).
        self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            version = self._db.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as e:
            raise CartError("INVALID_ARGUMENT", f"{self.path}: not a cartd database ({e})",
                            "open_db") from None
        self.schema_version = int(version[0]) if version else 0

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def sweeps(self) -> pd.DataFrame:
        rows = []
        sweep_tags = self._tags("sweep_tags", "sweep_id")
        notes = dict(self._db.execute("SELECT id, note FROM sweeps")) if self._annotated else {}
        budgets = dict(self._db.execute("SELECT id, budget_device_hours FROM sweeps")) \
            if self.schema_version >= 25 else {}
        now_us = int(time.time() * 1e6)
        for sweep_id, name, priority, created_us in self._db.execute(
                "SELECT id, name, priority, created_us FROM sweeps ORDER BY id DESC"):
            counts = dict(self._db.execute(
                "SELECT status, count(*) FROM runs WHERE sweep_id = ? GROUP BY status", (sweep_id,)))
            row = {"name": name, "sweep_id": sweep_id, "priority": priority,
                   "created": _client._time(created_us), "runs": sum(counts.values())}
            for state in _client.STATES:
                row[state] = counts.get(state, 0)
            row["expected_finish"] = pd.NaT
            row["runs_estimated"] = 0
            row["tags"] = sweep_tags.get(sweep_id, [])
            row["note"] = notes.get(sweep_id, "")
            # Device-hours as cartd counts them (docs/operations.md "Budgets"); an attempt still
            # running counts to now, and no run is known to hold more (the file has no live
            # ledger), so a running sweep's figures are cartd's less what its runs hold.
            spent_us, = self._db.execute(
                "SELECT coalesce(sum(max(0, coalesce(a.ended_us, ?) - coalesce(a.started_us, "
                "a.leased_us))), 0) FROM attempts AS a JOIN runs AS r ON r.id = a.run_id "
                "WHERE r.sweep_id = ?", (now_us, sweep_id)).fetchone()
            row["device_hours"] = spent_us / 3.6e9
            limit = budgets.get(sweep_id)
            row["budget"] = float("nan") if limit is None else limit
            row["budget_left"] = float("nan") if limit is None else limit - row["device_hours"]
            rows.append(row)
        return pd.DataFrame(rows, columns=_client.SWEEP_COLUMNS)

    def runs(self, sweep: Optional[str] = None, state: Union[None, str, Sequence[str]] = None,
             where: Optional[Mapping[str, Any]] = None) -> pd.DataFrame:
        states = [state] if isinstance(state, str) else list(state or [])
        for s in states:
            _client._state_value(s)  # the same error for an unknown state
        where, tags = _client._split_tags(where)
        sql = ("SELECT r.id, s.name, r.name, r.status, r.attempt, r.max_attempts, r.priority, "
               "r.params_json, r.stored_params, r.effective_params, r.memory_estimate_bytes, "
               "r.steps, r.parent_run_id, r.kind, r.created_us, r.updated_us, "
               "(SELECT a.worker_id FROM attempts AS a WHERE a.run_id = r.id "
               " ORDER BY a.attempt DESC LIMIT 1), "
               + ("r.note, " if self._annotated else "'', ") +
               # The classes of the attempts whose work the run kept (docs/architecture.md
               # "Device classes"), as cartd reads them; none before schema 19.
               ("(SELECT group_concat(dc, char(10)) FROM (SELECT ka.device_class AS dc "
                "FROM attempts AS ka WHERE ka.run_id = r.id AND ka.device_class IS NOT NULL AND "
                "(ka.outcome = 'SUCCEEDED' OR (ka.outcome IS NULL AND ka.started_us IS NOT NULL) "
                + ("OR ka.kept_work = 1" if self.schema_version >= 20 else
                   "OR EXISTS (SELECT 1 FROM checkpoints AS kc WHERE kc.run_id = r.id AND "
                   "kc.attempt = ka.attempt)") +
                ") GROUP BY ka.device_class ORDER BY min(ka.attempt))) "
                if self.schema_version >= 19 else "NULL ") +
               "FROM runs AS r JOIN sweeps AS s ON s.id = r.sweep_id")
        clauses, args = [], []
        if sweep:
            clauses.append("s.name = ?")
            args.append(sweep)
        if states:
            clauses.append(f"r.status IN ({','.join('?' * len(states))})")
            args.extend(s.upper() for s in states)
        for tag in tags:  # as cartd's filter: every one of them
            clauses.append("EXISTS (SELECT 1 FROM run_tags AS t WHERE t.run_id = r.id AND "
                           "t.tag = ?)" if self._annotated else "0")
            if self._annotated:
                args.append(tag)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        views = []
        latest = self._latest()
        run_tags = self._tags("run_tags", "run_id")
        for (run_id, sweep_name, name, status, attempt, max_attempts, priority, params_json,
             stored, effective, memory, steps, parent, kind, created, updated,
             worker, note, classes) in self._db.execute(sql + " ORDER BY r.id", args):
            view = scheduler_pb2.RunView(
                run_id=run_id, name=f"{sweep_name}/{name}", sweep=sweep_name,
                state=common_pb2.RunState.Value("RUN_STATE_" + status), attempt=attempt,
                max_attempts=max_attempts, priority=priority, stored_params=stored,
                effective_params=effective, memory_estimate_mib=(memory + (1 << 20) - 1) >> 20,
                total_steps=steps, worker_id=worker or "", parent_run_id=parent or 0,
                kind=_KIND.get(kind, common_pb2.JOB_KIND_TRAIN), created_us=created,
                updated_us=updated)
            view.params.update(json.loads(params_json))
            for tag in run_tags.get(run_id, []):
                view.tags.add(name=tag)
            view.note.text = note
            view.device_classes.extend(classes.split("\n") if classes else [])
            # The step is the highest any metric reached; the values carried, LIST_METRICS's.
            mine = latest.get(run_id, {})
            view.step = max((s for _, s in mine.values()), default=0)
            for metric, (value, _) in self._listed(mine).items():
                view.latest[metric] = float("nan") if value is None else value
            views.append(view)
        frame = _client._runs_frame(views)
        return _client._filter(frame, where) if where else frame

    def metric_names(self, run: Any) -> List[str]:
        """The names of every metric the run has logged, sorted (as Client.metric_names)."""
        run_id = self._run_id(run)
        return [name for (name,) in self._db.execute(
            "SELECT n.name FROM run_summaries AS s JOIN metric_names AS n ON n.id = s.name_id "
            "WHERE s.run_id = ? ORDER BY n.name", (run_id,))]

    def history(self, runs: Any, metrics: Union[None, str, Sequence[str]] = None,
                buckets: Optional[int] = None) -> pd.DataFrame:
        if buckets:
            raise CartError("FAILED_PRECONDITION",
                            "history(..., buckets=N) is cartd's downsampling: connect() to it",
                            "history")
        ids = [self._run_id(r) for r in _client._run_refs(runs)]
        names = [metrics] if isinstance(metrics, str) else list(metrics or [])
        sql = ("SELECT m.run_id, m.step, n.name, m.value, m.wall_time_us FROM metrics AS m "
               "JOIN metric_names AS n ON n.id = m.name_id WHERE m.run_id = ?")
        if names:
            sql += f" AND n.name IN ({','.join('?' * len(names))})"
        parts = []
        for run_id in ids:
            rows = self._db.execute(sql, [run_id, *names]).fetchall()
            parts.append(pd.DataFrame(rows, columns=["run_id", "step", "metric", "value", "wall_us"]))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            columns=["run_id", "step", "metric", "value", "wall_us"])
        frame["value"] = frame["value"].astype("float64")
        frame["metric"] = frame["metric"].astype("object")
        frame["wall_time"] = pd.to_datetime(frame.pop("wall_us").astype("int64"), unit="us",
                                            utc=True)
        frame = frame.astype({"run_id": "int64", "step": "int64"})
        return frame.sort_values(["run_id", "metric", "step"], kind="stable").reset_index(drop=True)

    @property
    def _annotated(self) -> bool:
        """Whether the file has tags and notes (schema 11 on)."""
        return self.schema_version >= 11

    def _tags(self, table: str, owner: str) -> dict:
        """Owner id -> its tag names, sorted (table and owner are this module's constants)."""
        out: dict = {}
        if self._annotated:
            for owner_id, tag in self._db.execute(
                    f"SELECT {owner}, tag FROM {table} ORDER BY {owner}, tag"):
                out.setdefault(owner_id, []).append(tag)
        return out

    def _latest(self):
        out: dict = {}
        for run_id, name, value, step in self._db.execute(
                "SELECT s.run_id, n.name, s.latest_value, s.latest_step FROM run_summaries AS s "
                "JOIN metric_names AS n ON n.id = s.name_id"):
            out.setdefault(run_id, {})[name] = (value, step)
        return out

    def _listed(self, latest):
        return {m: v for m, v in latest.items() if m in _client.LIST_METRICS}

    def _run_id(self, run: Any) -> int:
        if isinstance(run, str) and not run.isdigit():
            sweep, _, index = run.partition("/")
            found = self._db.execute(
                "SELECT r.id FROM runs AS r JOIN sweeps AS s ON s.id = r.sweep_id "
                "WHERE s.name = ? AND r.name = ?", (sweep, index)).fetchone()
            if not found:
                raise CartError("NOT_FOUND", f"no run '{run}' in {self.path}", "history")
            return found[0]
        return int(run)

    def table(self, kind: str, metric: str = "rho_max", rows: str = "", cols: str = "",
              sweeps: Sequence[str] = (), baseline: str = "", group_by: str = "",
              run: Any = None, lower_is_better: bool = False, value: str = "",
              max_points: int = 0, tags: Sequence[str] = (), cart: Optional[str] = None
              ) -> pd.DataFrame:
        """The results table of Client.table over this file: `cart results KIND --db` computes
        it with cartd's own queries, so the frame is the one cartd would give. Downsampled series
        (max_points) are cartd's alone."""
        if max_points:
            raise CartError("FAILED_PRECONDITION",
                            "table(..., max_points=N) is cartd's downsampling: connect() to it",
                            "table")
        args = [_client.cart_program(cart, "table"), "results", kind, "--db", self.path,
                "--format", "json", "--metric", metric]
        for flag, text in (("--rows", rows), ("--cols", cols), ("--baseline", baseline),
                           ("--group-by", group_by), ("--value", value)):
            if text:
                args += [flag, text]
        for sweep in ([sweeps] if isinstance(sweeps, str) else sweeps):
            args += ["--sweep", sweep]
        for tag in ([tags] if isinstance(tags, str) else tags):
            args += ["--tag", tag]
        if run is not None:
            args += ["--run", str(self._run_id(run))]
        if lower_is_better:
            args.append("--lower-is-better")
        printed = _client.run_cart(args, {}, "table")
        return _client.table_frame(json_format.Parse(printed, scheduler_pb2.Table()))

    def report(self, out: Union[str, os.PathLike] = "report", format: str = "md",
               plots: bool = True, val_set: str = "", title: str = "",
               sweeps: Optional[Mapping[str, str]] = None, cart: Optional[str] = None
               ) -> dict:
        """`cart report --db` over this file (as Client.report; `cart report` opens the file as
        cartd does, so a file of an older schema is migrated: stop an older cartd first)."""
        return _client.run_report(["--db", self.path], {}, out, format, plots, val_set, title,
                                  sweeps, cart)

    def plan(self, power: float = 0.8, alpha: float = 0.05,
             smallest_effect: Optional[Mapping[str, float]] = None,
             prior_sd: Optional[float] = None, sweeps: Optional[Mapping[str, str]] = None,
             cart: Optional[str] = None) -> pd.DataFrame:
        """`cart plan --db` over this file (as Client.plan)."""
        return _client.run_plan(["--db", self.path], {}, power, alpha, smallest_effect, prior_sd,
                                sweeps, cart)

    def attempts(self, runs: Any) -> pd.DataFrame:
        """One row per attempt of the runs, with what it ran on (as Client.attempts)."""
        env = self.schema_version >= 17
        sql = ("SELECT a.run_id, a.attempt, a.worker_id, "
               + ("a.device_class, " if self.schema_version >= 19 else "NULL, ") +
               "a.leased_us, coalesce(a.ended_us, 0), a.outcome, coalesce(a.reason, ''), "
               + ("e.items " if env else "NULL ") + "FROM attempts AS a "
               + ("LEFT JOIN environments AS e ON e.id = a.environment_id " if env else "") +
               "WHERE a.run_id = ? ORDER BY a.attempt")
        records = []
        for ref in _client._run_refs(runs):
            for (run_id, attempt, worker, device_class, leased, ended, outcome, reason,
                 items) in self._db.execute(sql, (self._run_id(ref),)):
                pairs = [tuple(line.split("\t", 1)) for line in (items or "").split("\n")
                         if "\t" in line]
                records.append({"run_id": run_id, "attempt": attempt, "worker_id": worker,
                                "device_class": device_class, "leased_us": leased,
                                "ended_us": ended, "outcome": outcome, "reason": reason,
                                "environment": pairs})
        return _client._attempts_frame(records)

    def eval_items(self, runs: Any) -> pd.DataFrame:
        """One row per item of each zero-shot task an evaluation scored (as Client.eval_items)."""
        import numpy as np

        blocks = []
        if self.schema_version < 22:
            return _client._concat_items(blocks)
        for ref in _client._run_refs(runs):
            run_id = self._run_id(ref)
            for task, loops, correct, correct_norm, logprob in self._db.execute(
                    "SELECT task, loops, correct, correct_norm, logprob FROM eval_items "
                    "WHERE run_id = ? ORDER BY task, loops", (run_id,)):
                blocks.append(_client._items_frame(
                    run_id, task, loops, correct, correct_norm,
                    np.frombuffer(logprob, dtype="<f8").tolist()))
        return _client._concat_items(blocks)

    def diff(self, *args: Any, **kwargs: Any) -> None:
        raise CartError("FAILED_PRECONDITION",
                        "diff() runs `cart runs diff`, which asks cartd: cartlab.connect() to it",
                        "diff")

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise CartError("FAILED_PRECONDITION",
                        f"{self.path} is opened read-only: submit, cancel, resume, extend, "
                        "follow, tag and note need cartd (cartlab.connect())", "open_db")

    submit = cancel = resume = extend = follow = tag = untag = note = apply_plan = _read_only
