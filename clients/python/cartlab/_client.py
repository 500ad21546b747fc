"""A cartd over gRPC, read into pandas DataFrames (docs/python.md)."""

from __future__ import annotations

import os
import uuid
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc
import numpy
import pandas as pd
import yaml

from ._config import ClientConfig
from ._errors import CartError
from ._proto.cart.v1 import (common_pb2, notify_pb2, notify_pb2_grpc, scheduler_pb2,
                             scheduler_pb2_grpc)

RunRef = Union[int, str]  # a run id, or its name "<sweep>/<index>"

# The run states by name, as `cart` prints them.
STATES = ("QUEUED", "BLOCKED", "LEASED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
# One ListRuns answer holds at most this many runs (scheduler.proto); pages are this big.
_PAGE = 1000
# The metrics whose latest values cartd's run list carries (Scheduler::ListRuns); the others come
# with history() and table().
LIST_METRICS = ("loss", "rho_max", "tokens_per_s", "mfu", "mfu_6n")


_STATE_NAMES = {v: k.removeprefix("RUN_STATE_") for k, v in common_pb2.RunState.items()}
_KIND_NAMES = {v: k.removeprefix("JOB_KIND_").lower() for k, v in common_pb2.JobKind.items()}


def _state_name(value: int) -> str:
    return _STATE_NAMES[value]


def _state_value(name: str) -> int:
    key = "RUN_STATE_" + name.upper()
    if key not in common_pb2.RunState.keys():
        raise ValueError(f"unknown run state '{name}' (known: {', '.join(STATES)})")
    return common_pb2.RunState.Value(key)


def _time(us: int) -> Any:
    return pd.Timestamp(us, unit="us", tz="UTC") if us > 0 else pd.NaT


def _typed(text: str) -> Any:
    """A config value as the run's config means it: an integer, a number, or the text."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


class Client:
    """A connection to one cartd. Use `cartlab.connect()` to make one; close it (or use `with`)
    when done. Every method raises CartError (with the gRPC code and cartd's message) when cartd
    refuses or cannot be reached."""

    def __init__(self, config: ClientConfig, timeout: float = 60.0):
        self.config = config
        self.timeout = timeout
        options = [("grpc.max_receive_message_length", 64 << 20)]
        if config.tls_ca:
            with open(config.tls_ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            if config.tls_server_name:
                options.append(("grpc.ssl_target_name_override", config.tls_server_name))
            self._channel = grpc.secure_channel(config.server, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(config.server, options=options)
        self._stub = scheduler_pb2_grpc.SchedulerServiceStub(self._channel)
        self._notify = notify_pb2_grpc.NotifyServiceStub(self._channel)
        self._metadata = [("authorization", "Bearer " + config.token)] if config.token else []

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- calls

    def _call(self, method: str, request: Any, timeout: Optional[float] = None,
              stub: Any = None) -> Any:
        try:
            return getattr(stub or self._stub, method)(request, metadata=self._metadata,
                                                       timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise CartError(e.code().name, e.details() or str(e), method) from None

    def _stream(self, method: str, request: Any, timeout: Optional[float] = None) -> Iterator[Any]:
        try:
            yield from getattr(self._stub, method)(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise CartError(e.code().name, e.details() or str(e), method) from None

    def run_id(self, run: RunRef) -> int:
        """The id of a run given by id or by name ("<sweep>/<index>")."""
        if isinstance(run, (int,)) or (hasattr(run, "__index__") and not isinstance(run, str)):
            return int(run)
        if isinstance(run, str) and run.isdigit():
            return int(run)
        response = self._call("GetRun", scheduler_pb2.GetRunRequest(name=str(run)))
        return response.run.run_id

    # ---- reads

    def sweeps(self) -> pd.DataFrame:
        """Every sweep, newest first: name, id, priority, when it was submitted, its runs by state,
        when cartd's placement plan expects its last estimated run to finish, its tags (a list)
        and its note; the device-hours its attempts used, and its device-hour budget with what is
        left of it (NaN: none of its own; see budgets())."""
        response = self._call("ListSweeps", scheduler_pb2.ListSweepsRequest())
        rows = []
        for s in response.sweeps:
            row = {"name": s.name, "sweep_id": s.sweep_id, "priority": s.priority,
                   "created": _time(s.created_us), "runs": sum(s.runs_by_state.values())}
            for state in STATES:
                row[state] = s.runs_by_state.get(state, 0)
            row["expected_finish"] = _time(s.expected_finish_us)
            row["runs_estimated"] = s.runs_estimated
            row["tags"] = [t.name for t in s.tags]
            row["note"] = s.note.text
            row["device_hours"] = s.spending.device_hours
            has_budget = s.HasField("budget")
            row["budget"] = s.budget.limit_device_hours if has_budget else float("nan")
            row["budget_left"] = s.budget.left_device_hours if has_budget else float("nan")
            rows.append(row)
        return pd.DataFrame(rows, columns=SWEEP_COLUMNS)

    def runs(self, sweep: Optional[str] = None, state: Union[None, str, Sequence[str]] = None,
             where: Optional[Mapping[str, Any]] = None) -> pd.DataFrame:
        """One row per run, by id: its ids and state, attempts, worker, steps, when it was made and
        last changed, when it should finish; then one column per config key (numbers as numbers),
        then `latest.<metric>` for loss, rho_max, tokens_per_s, mfu and mfu_6n (LIST_METRICS: what
        cartd's run list carries; a finished run's is its final value; other metrics come with
        history() and table()). `tags` holds each run's tags (a list, by name), `note` its note.

        `state`: a state name or several ("SUCCEEDED", ["QUEUED", "RUNNING"]). `where`: config
        keys and the values a run must have ({"d": 256, "R": [2, 4]}: a list means any of them);
        a key no run has raises KeyError naming the keys there are. `where={"tag": "leak"}`
        keeps the runs carrying that tag (a list of tags: runs carrying every one), chosen by
        cartd."""
        states = [state] if isinstance(state, str) else list(state or [])
        where, tags = _split_tags(where)
        request = scheduler_pb2.ListRunsRequest(sweep=sweep or "",
                                                states=[_state_value(s) for s in states],
                                                limit=_PAGE, tags=tags)
        views: List[Any] = []
        while True:
            request.offset = len(views)
            page = self._call("ListRuns", request)
            views.extend(page.runs)
            if not page.runs or len(views) >= page.total:
                break
        frame = _runs_frame(views)
        return _filter(frame, where) if where else frame

    def metric_names(self, run: RunRef) -> List[str]:
        """The names of every metric the run has logged, sorted ("loss", "rho_max",
        "val_ppl/wiki", …): what history() and table() can ask for."""
        response = self._call("GetRun", scheduler_pb2.GetRunRequest(run_id=self.run_id(run)))
        return sorted(response.run.latest)

    def data(self, run: RunRef) -> pd.DataFrame:
        """The data files the run reads (data lineage): one row per role ("train", "val:NAME",
        "task:NAME") with path, sha256, size_bytes, tokens, tokenizer, tokenizer_sha256,
        recorded_by and recorded_at; sha256 None while no one has recorded the file. Every
        attempt of the run checks its files against these before it trains."""
        response = self._call("GetRun", scheduler_pb2.GetRunRequest(run_id=self.run_id(run)))
        rows = [{"role": d.role, "path": d.path, "sha256": d.sha256 or None,
                 "size_bytes": d.size_bytes if d.sha256 else None,
                 "tokens": d.tokens if d.sha256 and d.tokens >= 0 else None,
                 "tokenizer": d.tokenizer or None,
                 "tokenizer_sha256": d.tokenizer_sha256 or None,
                 "recorded_by": d.recorded_by or None, "recorded_us": d.recorded_us}
                for d in response.data]
        frame = pd.DataFrame(rows, columns=["role", "path", "sha256", "size_bytes", "tokens",
                                            "tokenizer", "tokenizer_sha256", "recorded_by",
                                            "recorded_us"])
        frame["recorded_at"] = _times(list(frame.pop("recorded_us")))
        return frame

    def history(self, runs: Union[RunRef, Iterable[RunRef], pd.Series, pd.DataFrame],
                metrics: Union[None, str, Sequence[str]] = None,
                buckets: Optional[int] = None) -> pd.DataFrame:
        """The metric points of `runs` (ids, names, a `runs()` frame or its run_id column) as a
        long frame: run_id, step, metric, value, wall_time; every point unless `buckets`, in step
        order per run and metric. `metrics`: a name or several (None: every metric the run
        logged). With `buckets`, each series is cartd's downsampling to at most that many steps
        (the mean of each bucket: the `series` results table with max_points, as the dashboard
        draws it; wall_time is then NaT)."""
        ids = [self.run_id(r) for r in _run_refs(runs)]
        names = [metrics] if isinstance(metrics, str) else list(metrics or [])
        run_col: List[int] = []  # the bucketed rows, if any
        step_col: List[int] = []
        metric_col: List[str] = []
        value_col: List[float] = []
        wall_col: List[int] = []
        codes: Dict[str, int] = {}  # metric name -> its code in the frame's column
        run_parts: List[Any] = []
        step_parts: List[Any] = []
        code_parts: List[Any] = []
        value_parts: List[Any] = []
        wall_parts: List[Any] = []
        for run_id in ids:
            if buckets:
                if not names:
                    raise ValueError("history(..., buckets=N) needs the metrics named")
                for name in names:
                    table = self._call("QueryTable", scheduler_pb2.QueryTableRequest(
                        table="series", run_id=run_id, metric=name, max_points=int(buckets)))
                    for row in table.rows:
                        run_col.append(run_id)
                        step_col.append(int(row.cells[0].mean))
                        metric_col.append(name)
                        value_col.append(row.cells[1].mean if row.cells[1].n > 0 else float("nan"))
                        wall_col.append(0)
                continue
            # Columnar batches: each column converts in C, not point by point in Python.
            request = scheduler_pb2.StreamMetricsRequest(run_id=run_id, names=names, from_step=0,
                                                         columnar=True)
            for batch in self._stream("StreamMetrics", request):
                c = batch.columns
                local = numpy.array([codes.setdefault(n, len(codes)) for n in c.names],
                                    dtype="int32")
                code_parts.append(local[numpy.array(c.name_index, dtype="int32")])
                step_parts.append(numpy.array(c.steps, dtype="int64"))
                value_parts.append(numpy.array(c.values, dtype="float64"))
                wall_parts.append(numpy.array(c.wall_time_us, dtype="int64"))
                run_parts.append(numpy.full(len(c.steps), run_id, dtype="int64"))
        if run_col:  # the bucketed rows
            code_parts.append(numpy.array([codes.setdefault(n, len(codes)) for n in metric_col],
                                          dtype="int32"))
            step_parts.append(numpy.array(step_col, dtype="int64"))
            value_parts.append(numpy.array(value_col, dtype="float64"))
            wall_parts.append(numpy.array(wall_col, dtype="int64"))
            run_parts.append(numpy.array(run_col, dtype="int64"))
        join = lambda parts, dtype: numpy.concatenate(parts) if parts else numpy.array([], dtype)
        wall = pd.Series(join(wall_parts, "int64"))
        names_by_code = numpy.array(list(codes), dtype=object)
        frame = pd.DataFrame({
            "run_id": pd.Series(join(run_parts, "int64")),
            "step": pd.Series(join(step_parts, "int64")),
            "metric": pd.Series(names_by_code[join(code_parts, "int32")] if codes else [],
                                dtype="object"),
            "value": pd.Series(join(value_parts, "float64")),
            "wall_time": pd.to_datetime(wall, unit="us", utc=True).where(wall > 0),
        })
        return frame.sort_values(["run_id", "metric", "step"], kind="stable").reset_index(drop=True)

    def table(self, kind: str, metric: str = "rho_max", rows: str = "", cols: str = "",
              sweeps: Sequence[str] = (), baseline: str = "", group_by: str = "",
              run: Optional[RunRef] = None, lower_is_better: bool = False, value: str = "",
              max_points: int = 0, tags: Sequence[str] = ()) -> pd.DataFrame:
        """A results table, the same query as `cart results KIND` (pivot, best, deltas, series,
        ranks) with the same arguments. The frame holds each cell's mean (or its text for label
        cells; NaN for an empty cell) under the table's columns; `frame.attrs` has "title", and
        "std", "ci_low", "ci_high" and "n" frames of the same shape (the standard deviation over
        seeds, the mean's 95 % Student-t interval, NaN below two runs, and the runs each cell
        aggregates). `tags`: only runs carrying every one of them (`--tag`)."""
        request = scheduler_pb2.QueryTableRequest(
            table=kind, metric=metric, rows=rows, cols=cols, sweeps=list(sweeps),
            baseline=baseline, group_by=group_by, run_id=self.run_id(run) if run else 0,
            max_points=max_points, lower_is_better=lower_is_better, value=value,
            tags=[tags] if isinstance(tags, str) else list(tags))
        return table_frame(self._call("QueryTable", request))

    def report(self, out: Union[str, os.PathLike] = "report", format: str = "md",
               plots: bool = True, val_set: str = "", title: str = "",
               sweeps: Optional[Mapping[str, str]] = None, cart: Optional[str] = None
               ) -> Dict[str, str]:
        """Runs `cart report` against this cartd (docs/study.md): every table of the paper beside
        its published figures, a CSV per table and gnuplot plots, written to `out`. `sweeps`
        maps a part (stage1, stage2, baselines, ablations, faithfulness, leak, variable_r) to
        the sweep that holds it; `cart` names the `cart` program (default: $CART_BIN, else the
        one on PATH). Returns the paths written: {"markdown", "html" (format="html"),
        "tables", "plots"}. A failure raises CartError with cart's own message."""
        env = {"CART_SERVER": self.config.server, "CART_TOKEN": self.config.token,
               "CART_TLS_CA": self.config.tls_ca}
        return run_report([], env, out, format, plots, val_set, title, sweeps, cart)

    def plan(self, power: float = 0.8, alpha: float = 0.05,
             smallest_effect: Optional[Mapping[str, float]] = None,
             prior_sd: Optional[float] = None, sweeps: Optional[Mapping[str, str]] = None,
             cart: Optional[str] = None) -> pd.DataFrame:
        """Runs `cart plan` against this cartd (docs/study.md "Planning seeds"): one row per test
        of each claim that cannot tell, cheapest decision first: claim, planned, test, design,
        seeds_now, seeds_needed (per side), runs (new), rtx3090_hours, effect, sd, prior, note
        (why a test is not planned). `smallest_effect` maps a claim id to the smallest effect
        worth detecting (its test's units); `prior_sd` is the spread of one seed where a side has
        fewer than two runs."""
        env = {"CART_SERVER": self.config.server, "CART_TOKEN": self.config.token,
               "CART_TLS_CA": self.config.tls_ca}
        return run_plan([], env, power, alpha, smallest_effect, prior_sd, sweeps, cart)

    def apply_plan(self, power: float = 0.8, alpha: float = 0.05,
                   budget: Optional[float] = None,
                   smallest_effect: Optional[Mapping[str, float]] = None,
                   prior_sd: Optional[float] = None, sweeps: Optional[Mapping[str, str]] = None,
                   cart: Optional[str] = None) -> Dict[str, Any]:
        """Runs `cart plan --apply` against this cartd (docs/study.md "Planning seeds"): queues
        the planned seeds of the claims that cannot tell, cheapest decision first and, with
        `budget` (RTX 3090 hours), only whole claims that fit it; each new seed comes with
        copies of its run's derived jobs, and the plan is recorded so that the report's next
        look spends each claim's level sequentially. Returns {"plan_id" (0: nothing queued),
        "runs": a frame of run_id, sweep, name, seed, kind, parent_run_id}. A budget below one
        run raises CartError naming it."""
        import json

        env = {"CART_SERVER": self.config.server, "CART_TOKEN": self.config.token,
               "CART_TLS_CA": self.config.tls_ca}
        args = plan_args(cart, [], power, alpha, smallest_effect, prior_sd, sweeps) + ["--apply"]
        if budget is not None:
            args += ["--budget", repr(budget)]
        answer = json.loads(run_cart(args, env, "plan"))
        columns = ["run_id", "sweep", "name", "seed", "kind", "parent_run_id"]
        return {"plan_id": answer["plan_id"],
                "runs": pd.DataFrame(answer["runs"], columns=columns)}

    def eval_items(self, runs: Union[RunRef, Iterable[RunRef], pd.Series, pd.DataFrame]
                   ) -> pd.DataFrame:
        """One row per item of each zero-shot task an evaluation job scored, at each loop count
        (docs/study.md "Paired tests over items"): run_id, task, loops, item (its index in the
        task file), correct (bool: acc), correct_norm (bool: acc_norm; None but for multiple
        choice), logprob (LAMBADA: the target's log-likelihood in nats; NaN otherwise)."""
        blocks = []
        for ref in _run_refs(runs):
            run_id = self.run_id(ref)
            response = self._call("GetEvalItems",
                                  scheduler_pb2.GetEvalItemsRequest(run_id=run_id))
            for e in response.tasks:
                blocks.append(_items_frame(run_id, e.task, e.loops, e.correct, e.correct_norm,
                                           list(e.logprob)))
        return _concat_items(blocks)

    def attempts(self, runs: Union[RunRef, Iterable[RunRef], pd.Series, pd.DataFrame]
                 ) -> pd.DataFrame:
        """One row per attempt of the runs (docs/architecture.md "Environment records"): run_id,
        attempt, worker_id, device_class (the card model its worker registered as), leased,
        ended, outcome, reason, then one column per item of the environment its worker recorded
        (cart.version, torch.version, torch.cuda, blas.library, gpu.driver, precision, …; None
        where an attempt's record lacks it or none was recorded)."""
        records = []
        for ref in _run_refs(runs):
            response = self._call("GetRun", scheduler_pb2.GetRunRequest(run_id=self.run_id(ref)))
            for a in response.attempts:
                records.append({
                    "run_id": response.run.run_id, "attempt": a.attempt,
                    "worker_id": a.worker_id, "device_class": a.device_class or None,
                    "leased_us": a.leased_us, "ended_us": a.ended_us,
                    "outcome": a.outcome or None, "reason": a.reason,
                    "environment": [(item.key, item.value) for item in a.environment]})
        return _attempts_frame(records)

    def diff(self, a: RunRef, b: RunRef, metric: str = "loss",
             cart: Optional[str] = None) -> Dict[str, Any]:
        """How two runs differ, as `cart runs diff A B` says it (it runs that program: `cart`,
        $CART_BIN or PATH): {"a": {run_id, name, device_classes}, "b": …, "config", "data",
        "environment": frames of the keys that differ (key, a, b), "latest": a frame of the
        latest metrics both have (metric, a, b, delta), "series": {metric, common_steps,
        first_different_step (None: bit-identical at every common step)}}."""
        import json

        program = cart_program(cart, "diff")
        env = {"CART_SERVER": self.config.server, "CART_TOKEN": self.config.token,
               "CART_TLS_CA": self.config.tls_ca}
        out = json.loads(run_cart([program, "runs", "diff", str(a), str(b), "--metric", metric,
                                   "--json"], env, "diff"))
        for key in ("config", "data", "environment"):
            out[key] = pd.DataFrame(out[key], columns=["key", "a", "b"])
        out["latest"] = pd.DataFrame(out["latest"], columns=["metric", "a", "b", "delta"])
        return out

    # ---- changes

    def submit(self, spec: Union[str, os.PathLike, Mapping[str, Any]], dry_run: bool = False,
               request_id: Optional[str] = None, data_identity: bool = True,
               cart: Optional[str] = None, provenance: bool = True) -> Dict[str, Any]:
        """Submits a sweep: a sweep file's path, or the sweep as a dict (the file's keys: name,
        base, grid, variants, seeds, extra_seeds, priority, max_attempts). Returns {"sweep":
        name, "existing": whether an earlier submit with the same request_id made it, "runs": a
        runs() frame of the expanded runs (a dry run stores nothing; its run ids are 0)}. A bad
        file raises CartError INVALID_ARGUMENT naming file, line and key, as `cart sweep submit`
        prints.

        With `data_identity` (and a `cart` program: `cart`, $CART_BIN or PATH), the data files
        the sweep names that this machine can read are hashed here (`cart data identify`) and
        each run is bound to them, as `cart sweep submit` does; the others, or all of them
        without it, are recorded by the first worker that opens them (data()).

        With `provenance`, where the sweep comes from is recorded with it, as `cart sweep
        submit` records it (`cart sweep show` prints it): a file's path, sha256 and git checkout
        (commit, branch, changed files, diff), read by `cart sweep provenance`; a sweep given as
        a dict records its text's sha256 and that it came from Python."""
        if isinstance(spec, Mapping):
            text, file_name = yaml.safe_dump(dict(spec), sort_keys=False), "<dict>"
        else:
            with open(spec, encoding="utf-8") as f:
                text, file_name = f.read(), os.fspath(spec)
        request = scheduler_pb2.SubmitSweepRequest(
            spec_yaml=text, file_name=file_name, dry_run=dry_run,
            request_id=request_id or uuid.uuid4().hex)
        if data_identity and not dry_run:
            for entry in _sweep_data_identities(text, cart):
                request.data_files.add(**entry)
        if provenance and not dry_run:
            request.provenance.CopyFrom(_sweep_provenance(spec, text, cart))
        response = self._call("SubmitSweep", request, timeout=max(self.timeout, 300))
        return {"sweep": response.sweep.name, "existing": response.existing,
                "runs": _runs_frame(response.runs)}

    def cancel(self, run: RunRef, reason: str = "") -> str:
        """Cancels a run (a running one stops after a final checkpoint); returns its state."""
        response = self._call("CancelRun", scheduler_pb2.CancelRunRequest(
            run_id=self.run_id(run), reason=reason))
        return _state_name(response.run.state)

    def resume(self, run: RunRef, set: Optional[Mapping[str, Any]] = None) -> str:
        """Requeues a CANCELLED or FAILED run from its latest checkpoint; returns its state.
        `set` changes its config first ({"lr": 1.5e-4}; keys lr, lr_min, warmup, clip, dtype):
        a run that diverged resumes only with one."""
        changes = [f"{k}={v}" for k, v in (set or {}).items()]
        response = self._call("ResumeRun", scheduler_pb2.ResumeRunRequest(
            run_id=self.run_id(run), set=changes))
        return _state_name(response.run.state)

    def extend(self, run: RunRef, total_steps: int, schedule: Optional[str] = None) -> str:
        """Trains a SUCCEEDED run on to `total_steps` from its final checkpoint; returns its state.
        `schedule`: "stretch" (the cosine recomputed over the new total, a warm restart) or
        "hold" (go on at the final learning rate); None lets cartd stretch when the rate at the
        extension point changes at most 2x, and raises CartError FAILED_PRECONDITION naming
        both rates otherwise."""
        schedules = {None: scheduler_pb2.EXTEND_SCHEDULE_UNSPECIFIED,
                     "stretch": scheduler_pb2.EXTEND_SCHEDULE_STRETCH,
                     "hold": scheduler_pb2.EXTEND_SCHEDULE_HOLD}
        if schedule not in schedules:
            raise ValueError(f"schedule {schedule!r}: give 'stretch', 'hold' or None")
        response = self._call("ExtendRun", scheduler_pb2.ExtendRunRequest(
            run_id=self.run_id(run), total_steps=int(total_steps), schedule=schedules[schedule]))
        return _state_name(response.run.state)

    def tag(self, target: RunRef, *tags: str) -> List[str]:
        """Adds tags to a run (an id or "<sweep>/<index>") or a sweep (a name without "/"); each
        keeps who set it and when. A tag is 1..64 letters, digits and "._:/=+@-"; at most 32 on
        one run or sweep. Returns its tags after the change."""
        return self._annotate(target, add_tags=list(tags))["tags"]

    def untag(self, target: RunRef, *tags: str) -> List[str]:
        """Removes tags from a run or sweep (a missing tag is no error); returns those left."""
        return self._annotate(target, remove_tags=list(tags))["tags"]

    def note(self, target: RunRef, text: Optional[str] = None) -> Dict[str, Any]:
        """A run's or sweep's note: with `text`, replaces it ("" clears it; at most 8,192 bytes
        of text, newlines and tabs the only control characters). Returns {"text", "who",
        "at"} as it then is ("at": a UTC timestamp, NaT when never written)."""
        return self._annotate(target, note=text)["note"]

    # ---- notifications (docs/operations.md "Notifications")

    def subscribe(self, on: Union[str, Sequence[str]], webhook: Optional[str] = None,
                  slack: Optional[str] = None, email: Optional[str] = None,
                  run: Optional[RunRef] = None, sweep: Optional[str] = None,
                  lost_after_s: int = 0, stuck_factor: float = 0,
                  slip_share: float = 0) -> Dict[str, Any]:
        """Subscribes to events of a run, a sweep, or (neither given) every run of your own
        sweeps, delivered to exactly one of `webhook`, `slack` (an incoming-webhook URL) or
        `email`. `on`: event names ("failed", "lost", "stuck", "diverged", "leak_suspected",
        "preempted", "sweep_finished", "verdict_changed", "finish_slipped") or "all". Zero
        thresholds take cartd's defaults (600 s, 5, 0.25). Returns the subscription as
        `subscriptions()` lists it (a URL shown up to its host)."""
        targets = {"webhook": webhook, "slack": slack, "email": email}
        given = {k: v for k, v in targets.items() if v}
        if len(given) != 1:
            raise ValueError("give exactly one of webhook=, slack= or email=")
        (channel, target), = given.items()
        events = on if isinstance(on, str) else ",".join(on)
        request = notify_pb2.SubscribeRequest(
            run_id=self.run_id(run) if run is not None else 0, sweep=sweep or "", events=events,
            channel=channel, target=target, lost_after_s=int(lost_after_s),
            stuck_factor=float(stuck_factor), slip_share=float(slip_share))
        return _subscription(self._call("Subscribe", request, stub=self._notify))

    def budgets(self) -> pd.DataFrame:
        """Device-hour budgets: yours and your sweeps' (an admin's: every one), one row each with
        scope ("user" or "sweep"), name, limit, spent, held (what running runs are still expected
        to take), left, and where the limit comes from (docs/operations.md "Budgets")."""
        response = self._call("ListBudgets", scheduler_pb2.ListBudgetsRequest())
        return pd.DataFrame([_budget(b) for b in response.budgets], columns=BUDGET_COLUMNS)

    def set_budget(self, device_hours: float, sweep: Optional[str] = None,
                   user: Optional[str] = None) -> Dict[str, Any]:
        """Sets or raises the budget of a sweep or a user (admins only; never below what is
        already spent: CartError FAILED_PRECONDITION names it). Returns it as budgets() shows it."""
        if (sweep is None) == (user is None):
            raise ValueError("give exactly one of sweep= and user=")
        request = scheduler_pb2.SetBudgetRequest(sweep=sweep or "", user=user or "",
                                                 device_hours=float(device_hours))
        return _budget(self._call("SetBudget", request))

    def subscriptions(self, all: bool = False) -> pd.DataFrame:
        """Your subscriptions (everyone's for an admin with all=True), one row each."""
        response = self._call("ListSubscriptions", notify_pb2.ListSubscriptionsRequest(all=all),
                              stub=self._notify)
        rows = [_subscription(s) for s in response.subscriptions]
        columns = ["id", "owner", "scope", "run_id", "sweep", "events", "channel", "target",
                   "lost_after_s", "stuck_factor", "slip_share", "created"]
        return pd.DataFrame(rows, columns=columns)

    def unsubscribe(self, subscription: int) -> None:
        """Removes one of your subscriptions; what it had pending is given up."""
        self._call("Unsubscribe", notify_pb2.UnsubscribeRequest(id=int(subscription)),
                   stub=self._notify)

    def send_test(self, subscription: int) -> int:
        """Queues a test notification on one of your subscriptions at once; its id."""
        response = self._call("SendTest", notify_pb2.SendTestRequest(id=int(subscription)),
                              stub=self._notify)
        return response.notification_id

    def notifications(self, subscription: int = 0, limit: int = 50,
                      all: bool = False) -> pd.DataFrame:
        """What was sent on your subscriptions, newest first: event, state (PENDING, DELIVERED,
        GAVE_UP), tries, the last try's answer, summary."""
        response = self._call("NotificationLog", notify_pb2.NotificationLogRequest(
            subscription_id=int(subscription), all=all, limit=int(limit)), stub=self._notify)
        rows = []
        for n in response.notifications:
            rows.append({"id": n.id, "subscription": n.subscription_id, "event": n.event,
                         "state": n.state, "tries": n.tries,
                         "last_try": n.log[-1].detail if n.log else None,
                         "run_id": n.run_id or None, "happened": _time(n.happened_us),
                         "summary": n.summary, "idempotency_key": n.idempotency_key})
        columns = ["id", "subscription", "event", "state", "tries", "last_try", "run_id",
                   "happened", "summary", "idempotency_key"]
        return pd.DataFrame(rows, columns=columns)

    def _annotate(self, target: RunRef, add_tags: Sequence[str] = (),
                  remove_tags: Sequence[str] = (), note: Optional[str] = None) -> Dict[str, Any]:
        request = scheduler_pb2.AnnotateRequest(add_tags=list(add_tags),
                                                remove_tags=list(remove_tags))
        if _is_sweep_ref(target):
            request.sweep = str(target)
        else:
            request.run_id = self.run_id(target)
        if note is not None:
            request.set_note = True
            request.note = note
        response = self._call("Annotate", request)
        return {"tags": [t.name for t in response.tags],
                "note": {"text": response.note.text, "who": response.note.who,
                         "at": _time(response.note.at_us)}}

    def follow(self, run: RunRef, metrics: Union[None, str, Sequence[str]] = None,
               from_step: int = 0) -> Iterator[Dict[str, Any]]:
        """The run's metric points from `from_step` on as they arrive, one dict each (step,
        metric, value, wall_time), until the run ends; stop early by leaving the loop."""
        names = [metrics] if isinstance(metrics, str) else list(metrics or [])
        request = scheduler_pb2.StreamMetricsRequest(run_id=self.run_id(run), names=names,
                                                     from_step=from_step, follow=True)
        for batch in self._stream("StreamMetrics", request):
            for p in batch.points:
                yield {"step": p.step, "metric": p.name, "value": p.value,
                       "wall_time": _time(p.wall_time_us)}


def _subscription(s: Any) -> Dict[str, Any]:
    return {"id": s.id, "owner": s.owner, "scope": s.scope, "run_id": s.run_id or None,
            "sweep": s.sweep or None, "events": list(s.events), "channel": s.channel,
            "target": s.target, "lost_after_s": s.lost_after_s, "stuck_factor": s.stuck_factor,
            "slip_share": s.slip_share, "created": _time(s.created_us)}


def table_frame(table: Any) -> pd.DataFrame:
    """A results Table (scheduler.proto) as table() returns it."""
    columns = list(table.columns)
    nan = float("nan")
    means, stds, lows, highs, ns = [], [], [], [], []
    for row in table.rows:
        means.append([c.text if c.text else (c.mean if c.n > 0 else nan) for c in row.cells])
        stds.append([c.std if c.n > 0 and not c.text else nan for c in row.cells])
        lows.append([c.ci_low if c.n > 1 and not c.text else nan for c in row.cells])
        highs.append([c.ci_high if c.n > 1 and not c.text else nan for c in row.cells])
        ns.append([c.n for c in row.cells])
    frame = pd.DataFrame(means, columns=columns)
    frame.attrs["title"] = table.title
    frame.attrs["std"] = pd.DataFrame(stds, columns=columns)
    frame.attrs["ci_low"] = pd.DataFrame(lows, columns=columns)
    frame.attrs["ci_high"] = pd.DataFrame(highs, columns=columns)
    frame.attrs["n"] = pd.DataFrame(ns, columns=columns)
    return frame


def cart_program(cart: Optional[str], call: str) -> str:
    """The `cart` program: `cart`, else $CART_BIN, else the one on PATH."""
    import shutil

    program = cart or os.environ.get("CART_BIN") or shutil.which("cart")
    if not program:
        raise CartError("FAILED_PRECONDITION", f"{call}() runs the `cart` program: none on PATH "
                        "(give cart=PATH or set CART_BIN)", call)
    return program


def run_cart(args: List[str], env: Mapping[str, str], call: str) -> str:
    """Runs `cart` with args; its standard output, or CartError with its own words."""
    import subprocess

    full_env = dict(os.environ, **{k: v for k, v in env.items() if v})
    done = subprocess.run(args, env=full_env, capture_output=True, text=True)
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip()).removeprefix("cart: ")
        code = "INVALID_ARGUMENT" if done.returncode == 2 else "UNKNOWN"
        raise CartError(code, message, call)
    return done.stdout


def _sweep_data_identities(text: str, cart: Optional[str]) -> List[Dict[str, Any]]:
    """`cart data identify --sweep` over the sweep's text: the identities of its data files
    this machine can read; none without a `cart` program (the first worker records them)."""
    import json
    import shutil
    import tempfile

    program = cart or os.environ.get("CART_BIN") or shutil.which("cart")
    if not program:
        return []
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        out = run_cart([program, "data", "identify", "--sweep", f.name, "--json"], {}, "submit")
    return json.loads(out)


def _sweep_provenance(spec: Any, text: str, cart: Optional[str]) -> Any:
    """Where the sweep comes from (docs/architecture.md "Sweep provenance"): for a file, what
    `cart sweep provenance` reads of it and its git checkout (its path and sha256 alone without
    a `cart` program); for a dict, its text's sha256 and that it came from Python."""
    import hashlib
    import json
    import shutil

    from google.protobuf import json_format

    record = scheduler_pb2.SweepProvenance()
    program = cart or os.environ.get("CART_BIN") or shutil.which("cart")
    if not isinstance(spec, Mapping) and program:
        json_format.Parse(run_cart([program, "sweep", "provenance", os.fspath(spec)], {}, "submit"),
                          record)
        return record
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if isinstance(spec, Mapping):
        items = [("file.path", "a dict given to cartlab's submit()"), ("file.sha256", sha),
                 ("git", "not recorded: the sweep came from Python, not a file")]
    else:
        items = [("file.path", os.path.abspath(os.fspath(spec))), ("file.sha256", sha),
                 ("git", "not recorded: no cart program to read the checkout")]
    for key, value in items:
        record.items.add(key=key, value=value)
    return record


def run_plan(source: List[str], env: Mapping[str, str], power: float, alpha: float,
             smallest_effect: Optional[Mapping[str, float]], prior_sd: Optional[float],
             sweeps: Optional[Mapping[str, str]], cart: Optional[str]) -> pd.DataFrame:
    """`cart plan --json` with `source` (["--db", FILE], or nothing for cartd), as a frame."""
    import json

    args = plan_args(cart, source, power, alpha, smallest_effect, prior_sd, sweeps)
    columns = ["claim", "planned", "test", "design", "seeds_now", "seeds_needed", "fixed_seeds",
               "looks", "runs", "rtx3090_hours", "effect", "sd", "prior", "note"]
    rows = []
    for claim in json.loads(run_cart(args, env, "plan")):
        for test in claim["tests"] or [{"test": "", "note": claim["note"]}]:
            rows.append({"claim": claim["claim"], "planned": claim["planned"],
                         **{k: test.get(k) for k in columns[2:]}})
    return pd.DataFrame(rows, columns=columns)


def plan_args(cart: Optional[str], source: List[str], power: float, alpha: float,
              smallest_effect: Optional[Mapping[str, float]], prior_sd: Optional[float],
              sweeps: Optional[Mapping[str, str]]) -> List[str]:
    """The `cart plan --json` command line for these options."""
    args = [cart_program(cart, "plan"), "plan", "--json", *source, "--power", repr(power),
            "--alpha", repr(alpha)]
    for claim, effect in (smallest_effect or {}).items():
        args += ["--smallest-effect", f"{claim}={effect!r}"]
    if prior_sd is not None:
        args += ["--prior-sd", repr(prior_sd)]
    for part, sweep in (sweeps or {}).items():
        if part not in REPORT_PARTS:
            raise CartError("INVALID_ARGUMENT", f"plan(): unknown part '{part}' (parts: "
                            f"{', '.join(REPORT_PARTS)})", "plan")
        args += ["--" + part.replace("_", "-"), sweep]
    return args


# The study's parts, as `cart report` names its --PART options.
REPORT_PARTS = ("stage1", "stage2", "baselines", "ablations", "faithfulness", "leak",
                "variable_r")


def run_report(source: List[str], env: Mapping[str, str], out: Union[str, os.PathLike],
               format: str, plots: bool, val_set: str, title: str,
               sweeps: Optional[Mapping[str, str]], cart: Optional[str]) -> Dict[str, str]:
    """`cart report` with `source` (["--db", PATH] or none: cartd from `env`) into `out`."""
    program = cart_program(cart, "report")
    if format not in ("md", "html"):
        raise ValueError(f"format '{format}' is not md or html")
    args = [program, "report", *source, "--out", os.fspath(out), "--format", format]
    if not plots:
        args.append("--no-plots")
    if val_set:
        args += ["--val-set", val_set]
    if title:
        args += ["--title", title]
    for part, sweep in (sweeps or {}).items():
        if part not in REPORT_PARTS:
            raise ValueError(f"report part '{part}' is not one of {', '.join(REPORT_PARTS)}")
        args += ["--" + part.replace("_", "-"), sweep]
    run_cart(args, env, "report")
    out = os.fspath(out)
    paths = {"markdown": os.path.join(out, "report.md"), "tables": os.path.join(out, "tables"),
             "plots": os.path.join(out, "plots")}
    if format == "html":
        paths["html"] = os.path.join(out, "report.html")
    return paths


def _is_sweep_ref(target: Any) -> bool:
    """A sweep's name: text that is neither a run id (digits) nor a run's "<sweep>/<index>"."""
    return isinstance(target, str) and not target.isdigit() and "/" not in target


def _split_tags(where: Optional[Mapping[str, Any]]) -> Any:
    """`where` without its "tag" entry, and the tags that entry asks for (a tag or a list)."""
    if not where or "tag" not in where:
        return where, []
    rest = {k: v for k, v in where.items() if k != "tag"}
    wanted = where["tag"]
    tags = [wanted] if isinstance(wanted, str) else list(wanted)
    return rest, [str(t) for t in tags]


def _run_refs(runs: Any) -> List[RunRef]:
    if isinstance(runs, pd.DataFrame):
        return [int(r) for r in runs["run_id"]]
    if isinstance(runs, (str, int)) or hasattr(runs, "__index__"):
        return [runs]
    return list(runs)


_RUN_COLUMNS = ["run_id", "name", "sweep", "state", "kind", "attempt", "max_attempts", "priority",
                "total_steps", "step", "worker_id", "parent_run_id", "stored_params",
                "effective_params", "memory_estimate_mib", "created", "updated",
                "expected_finish", "tags", "note", "device_classes"]
# sweeps()' columns, for connect() and open_db alike.
BUDGET_COLUMNS = ["scope", "name", "limit", "spent", "held", "left", "source"]


def _budget(b: Any) -> Dict[str, Any]:
    return {"scope": b.scope, "name": b.name, "limit": b.limit_device_hours,
            "spent": b.spent_device_hours, "held": b.held_device_hours,
            "left": b.left_device_hours, "source": b.source}


SWEEP_COLUMNS = ["name", "sweep_id", "priority", "created", "runs", *STATES, "expected_finish",
                 "runs_estimated", "tags", "note", "device_hours", "budget", "budget_left"]


def _typed_column(values: List[Optional[str]]) -> List[Any]:
    """_typed over a column: all of it as integers, else all as numbers (a column of numbers is
    one type, as pandas holds it), else each value on its own; each distinct value converted
    once."""
    distinct = {v for v in values if v is not None}
    converted: Dict[str, Any] = {}
    for convert in (int, float):
        try:
            converted = {v: convert(v) for v in distinct}
            break
        except ValueError:
            continue
    else:
        converted = {v: _typed(v) for v in distinct}  # text, or numbers mixed with text
    converted[None] = None
    return [converted[v] for v in values]


def _runs_frame(views: Sequence[Any]) -> pd.DataFrame:
    """The runs() frame of RunViews, built column by column (10,000 runs x 50 columns)."""
    keys: Dict[str, None] = {}
    metrics: Dict[str, None] = {}
    for v in views:
        for k in v.params:
            keys.setdefault(k, None)
        for m in v.latest:
            metrics.setdefault(m, None)
    columns: Dict[str, Any] = {
        "run_id": [v.run_id for v in views],
        "name": [v.name for v in views],
        "sweep": [v.sweep for v in views],
        "state": [_STATE_NAMES[v.state] for v in views],
        "kind": [_KIND_NAMES[v.kind] for v in views],
        "attempt": [v.attempt for v in views],
        "max_attempts": [v.max_attempts for v in views],
        "priority": [v.priority for v in views],
        "total_steps": [v.total_steps for v in views],
        "step": [v.step for v in views],
        "worker_id": [v.worker_id for v in views],
        "parent_run_id": [v.parent_run_id for v in views],
        "stored_params": [v.stored_params for v in views],
        "effective_params": [v.effective_params for v in views],
        "memory_estimate_mib": [v.memory_estimate_mib for v in views],
        "created": _times([v.created_us for v in views]),
        "updated": _times([v.updated_us for v in views]),
        "expected_finish": _times([v.expected_finish_us for v in views]),
        "tags": [[t.name for t in v.tags] for v in views],
        "note": [v.note.text for v in views],
        "device_classes": [list(v.device_classes) for v in views],
    }
    params = [dict(v.params) for v in views]  # Python dicts: far faster to look up than maps
    for k in sorted(keys):
        columns[k] = _typed_column([p.get(k) for p in params])
    latest = [dict(v.latest) for v in views]
    nan = float("nan")
    for m in sorted(metrics):
        columns["latest." + m] = [d[m] if m in d else nan for d in latest]
    return pd.DataFrame(columns, columns=_RUN_COLUMNS + sorted(keys) +
                        ["latest." + m for m in sorted(metrics)])


ITEM_COLUMNS = ["run_id", "task", "loops", "item", "correct", "correct_norm", "logprob"]


def _items_frame(run_id: int, task: str, loops: int, correct: str, correct_norm: str,
                 logprob: List[float]) -> pd.DataFrame:
    """eval_items()' rows of one task at one loop count."""
    import numpy as np

    n = len(correct)
    return pd.DataFrame({
        "run_id": np.full(n, run_id, dtype=np.int64), "task": [task] * n,
        "loops": np.full(n, loops, dtype=np.int64), "item": np.arange(n, dtype=np.int64),
        "correct": [c == "1" for c in correct],
        "correct_norm": [c == "1" for c in correct_norm] if correct_norm else [None] * n,
        "logprob": np.asarray(logprob, dtype=np.float64) if logprob else np.full(n, np.nan)},
        columns=ITEM_COLUMNS)


def _concat_items(blocks: List[pd.DataFrame]) -> pd.DataFrame:
    if not blocks:
        return pd.DataFrame(columns=ITEM_COLUMNS)
    return pd.concat(blocks, ignore_index=True)


def _attempts_frame(records: List[Dict[str, Any]]) -> pd.DataFrame:
    """attempts()' frame of one dict per attempt, its record's items in "environment"."""
    keys: Dict[str, None] = {}
    rows = []
    for record in records:
        row = {k: v for k, v in record.items() if k != "environment"}
        for key, value in record["environment"]:
            keys.setdefault(key, None)
            row[key] = value
        rows.append(row)
    head = ["run_id", "attempt", "worker_id", "device_class", "leased_us", "ended_us", "outcome",
            "reason"]
    frame = pd.DataFrame(rows, columns=head + list(keys))
    for key in keys:  # an item an attempt's record lacks is None, not NaN
        frame[key] = frame[key].astype(object).where(frame[key].notna(), None)
    frame.insert(4, "leased", _times(list(frame.pop("leased_us"))))
    frame.insert(5, "ended", _times(list(frame.pop("ended_us"))))
    return frame


def _times(us: List[int]) -> pd.Series:
    """Unix microseconds as UTC timestamps; 0 (none) as NaT."""
    raw = pd.Series(us, dtype="int64")
    return pd.to_datetime(raw, unit="us", utc=True).where(raw > 0)


def _filter(frame: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    mask = pd.Series(True, index=frame.index)
    for key, wanted in where.items():
        if key not in frame.columns:
            known = [c for c in frame.columns if c not in _RUN_COLUMNS and not c.startswith("latest.")]
            raise KeyError(f"no run has config key '{key}' (keys: {', '.join(known) or 'none'})")
        values = wanted if isinstance(wanted, (list, tuple, set)) else [wanted]
        mask &= frame[key].isin(list(values))
    return frame[mask].reset_index(drop=True)
