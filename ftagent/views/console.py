"""Live progress on the console while a session runs, from its events (an EventLog subscriber).

Two renderings of the same state:

* a terminal (TTY): one live status line — ``loop i (k of N) · step · elapsed · time left · expected N more``
  (the last re-forecast, issue 43, counted down since it was made, and never less than what the running
  trainings' own progress says is left of them) — and a bar for
  the running command (training steps with loss, lr and ETA; evaluation items per split, or a
  spinner with the phase when OpenCompass gives no count); with K trials at once, one line per running
  trial instead of the bar — ``loop i (k of N) · slot 1 (GPU 2,3) · train 120/300 (loss 0.41)``;
* anything else (CI, tmux logs, pipes): plain lines — one per step start/end, scenario stage, LLM
  call and evaluation result — plus a progress line whenever nothing was printed for
  ``heartbeat_s`` (8) seconds, so a log never goes 10 s without a line (with trials at once, one such line
  per running trial).

``quiet`` prints nothing. :meth:`ConsoleProgress.stop` ends the live display before the caller
prints the report, so the report is never interleaved with a refresh.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from ftagent.core.durations import format_duration
from ftagent.core.stats import interval_line


class ConsoleProgress:
    """Subscribe an instance to the session's EventLog; call :meth:`start` and :meth:`stop` around the run."""

    def __init__(self, console: Console, *, loop_n: int | None = None, timeout_s: float | None = None,
                 quiet: bool = False, live: bool | None = None, heartbeat_s: float = 8.0,
                 clock=time.time) -> None:
        self.console = console
        self.loop_n, self.timeout_s = loop_n, timeout_s
        self.quiet = quiet
        self.live_mode = console.is_terminal if live is None else live
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.started = clock()
        self.elapsed_before = 0.0
        self.loop: int | None = None
        self.step = "scenario"
        self.task: tuple[str, int | None, int | None, dict[str, Any]] | None = None  # phase, done, total, detail
        self.task_at: float | None = None  # when the running command last reported progress
        self.left_s: tuple[float, float] | None = None  # the last re-forecast's seconds left, and when it was made
        self._lock = threading.Lock()
        self._last_line = clock()
        self._live: Live | None = None
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                             TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                             console=console, transient=True)
        self._bar_task: Any = None
        self.trials: dict[int, dict[str, Any]] = {}  # K trials at once: loop -> slot, step, task (running ones)
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self, elapsed_before: float = 0.0) -> None:
        """Begin displaying (``elapsed_before``: session time used by earlier runs, for the time left)."""
        self.elapsed_before = elapsed_before
        if self.quiet:
            return
        if self.live_mode:
            self._live = Live(self._renderable(), console=self.console, refresh_per_second=2, transient=True)
            self._live.start()
        else:
            self._heartbeat = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._heartbeat.start()

    def stop(self) -> None:
        """End the display; afterwards the console is free for the report."""
        self._stop.set()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=2)
            self._heartbeat = None

    # -- the subscriber ---------------------------------------------------------------------------------
    def __call__(self, event: Any) -> None:
        if self.quiet:
            return
        with self._lock:
            line = self._apply(event)
        if line is not None:
            self._print(line)
        if self._live is not None:
            self._live.update(self._renderable())

    def _apply(self, ev: Any) -> str | None:
        kind = ev.type
        if ev.loop is not None:
            self.loop = ev.loop
        self._track_trial(ev)
        if kind == "trial_start":
            how = "resumes" if ev.resumed else "starts"
            return f"{self._where()} {how} on {ev.slot_label or f'slot {ev.slot}'} at {ev.step}"
        if kind == "scenario_stage":  # a stage's last progress (the baseline's "eval:test 100/100") ends with it
            self.step, self.task = f"scenario: {ev.stage}", None
            return f"scenario {ev.stage}: {ev.status}" if ev.status in ("done", "failed", "cached") else None
        if kind == "step_start":
            self.step, self.task = ev.step, None
            return f"{self._where()} {ev.step} …"
        if kind == "step_end":
            self.task = None
            tail = f" → {ev.goto}" if ev.goto else ""
            why = f": {ev.failure.summary()}" if ev.failure else ""
            return f"{self._where()} {ev.step} {ev.status} in {short_duration(ev.duration_s)}{tail}{why}"[:300]
        if kind == "progress":
            self.task = (ev.phase, ev.done, ev.total, dict(ev.detail))
            self.task_at = ev.ts
            return None  # shown by the bar or the heartbeat
        if kind == "llm_call":
            cost = "cost unknown" if ev.cost_usd is None else f"${ev.cost_usd:.4f}"
            return f"LLM {ev.stage}: {ev.prompt_tokens}+{ev.completion_tokens} tokens, {cost}, {ev.latency_s:.1f}s"
        if kind == "benchmark_result":
            who = "baseline" if ev.baseline else self._where()
            return f"{who} {ev.split} {ev.core_metric}: {ev.score}"
        if kind == "feedback":
            score = ("no validation score" if ev.score is None
                     else interval_line(ev.score, getattr(ev, 'intervals', []), 'validation'))
            chosen = (getattr(ev, "parts", None) or {}).get("selection")
            if chosen is not None and chosen.score is not None:  # what decided (issue 39 item 5)
                score += "; " + interval_line(chosen.score, getattr(ev, "intervals", []), "selection")
            return f"{self._where()} feedback: {'new best' if ev.decision else 'not better'} ({score})"[:300]
        if kind == "contamination":  # every scan, passing or not (issue 35)
            spaces = getattr(ev, "input_spaces", None) or []
            verdict = "clean" if ev.passed else ", ".join(
                ([f"{ev.flagged_rows:,} row(s) hold benchmark items"] if ev.flagged_rows or not spaces else [])
                + ([f"the rows answer most of {len(spaces)} benchmark input space(s)"] if spaces else []))
            return (f"{self._where()} contamination scan of {ev.dataset}: {ev.rows_checked:,} rows vs "
                    f"{ev.items_checked:,} benchmark items, {verdict}")
        if kind == "integrity":  # the integrity guard's verdict on the candidate (issue 31.5)
            flagged = [c for c in ev.checks if c.passed is False]
            if not flagged:
                return f"{self._where()} integrity: {sum(1 for c in ev.checks if c.passed)} checks clean"
            return (f"{self._where()} integrity FLAGGED (cannot become SOTA): "
                    + "; ".join(f"{c.name}: {c.detail}" for c in flagged))[:300]
        if kind == "reforecast":  # after every step: what is left, from this session's step times (issue 43)
            from ftagent.views.forecast_text import reforecast_line

            self.left_s = (ev.reforecast.remaining_s, ev.ts)
            # one line after each step; one made on a command's progress only refreshes "expected … more"
            return reforecast_line(ev.reforecast) if ev.step_time is not None else None
        if kind == "leftovers_reaped":
            return f"warning: {ev.message}"[:300]
        if kind == "message" and ev.level != "info":
            return f"{ev.level}: {ev.text}"[:300]
        return None

    def _track_trial(self, ev: Any) -> None:
        """Per running trial: its slot, its step and its command's progress (one line each)."""
        kind = ev.type
        if kind == "trial_start":
            self.trials[ev.loop] = {"slot": ev.slot_label or f"slot {ev.slot}", "step": ev.step, "task": None}
        trial = self.trials.get(ev.loop) if ev.loop is not None else None
        if trial is None:
            return
        if kind == "step_start":
            trial.update(step=ev.step, task=None)
        elif kind == "step_end":
            trial["task"] = None
        elif kind == "progress":
            trial["task"], trial["at"] = (ev.phase, ev.done, ev.total, dict(ev.detail)), ev.ts
        elif kind in ("loop_end", "session_end"):
            self.trials.pop(ev.loop, None)

    def trial_lines(self) -> list[str]:
        """One line per running trial (K trials at once): ``loop 2 (3 of 4) · slot 1 (core 1) · train 30/60``."""
        out = []
        for loop, trial in sorted(self.trials.items()):
            task = _task_text(trial["task"])
            out.append(" · ".join(x for x in (loop_label(loop, self.loop_n), trial["slot"], trial["step"], task) if x))
        return out

    # -- rendering --------------------------------------------------------------------------------------
    def _where(self) -> str:
        if self.loop is None:
            return "scenario"
        return loop_label(self.loop, self.loop_n)

    def status_line(self) -> str:
        """``loop i (k of N) · step · elapsed · time left`` (the TTY header and the heartbeat's start)."""
        used = self.elapsed_before + (self.clock() - self.started)
        head = [f"{len(self.trials)} trials at once"] if len(self.trials) > 1 else [self._where(), self.step]
        parts = [*head, f"elapsed {format_duration(used)}"]
        if self.timeout_s is not None:
            parts.append(f"left {format_duration(max(0.0, self.timeout_s - used))}")
        if self.left_s is not None:  # the last re-forecast, counted down since it was made
            parts.append(f"expected {format_duration(self.expected_s())} more")
        return " · ".join(parts)

    def expected_s(self) -> float:
        """The last re-forecast counted down since it was made, never less than the longest running command's own
        ETA (a training's ``ETA`` in its progress, counted down since that progress came): what is left of the
        session is at least what is left of each trial in it."""
        now = self.clock()
        counted = max(0.0, self.left_s[0] - (now - self.left_s[1])) if self.left_s is not None else 0.0
        running = [(self.task, self.task_at)] if not self.trials else [
            (t["task"], t.get("at")) for t in self.trials.values()]
        etas = [task[3]["eta_s"] - max(0.0, now - at) for task, at in running
                if task is not None and at is not None and isinstance(task[3].get("eta_s"), int | float)]
        return max([counted, *etas])

    def task_line(self) -> str:
        """The running command's progress as text ('' when none is reported)."""
        return _task_text(self.task)

    def _renderable(self):
        header = Text(self.status_line(), style="bold")
        if len(self.trials) > 1:  # K trials at once: a line each instead of one bar
            return Group(header, *(Text(f"  {line}") for line in self.trial_lines()))
        if self.task is None:
            return header
        phase, done, total, _ = self.task
        if self._bar_task is None:
            self._bar_task = self._bar.add_task("", total=None)
        self._bar.update(self._bar_task, description=self.task_line(), completed=done or 0, total=total or None)
        return Group(header, self._bar.get_renderable())

    def _print(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        if self._live is not None:
            self._live.console.print(f"[dim]{stamp}[/dim] {line}", highlight=False, markup=True)
        else:
            self.console.print(f"{stamp} {line}", highlight=False, markup=False, soft_wrap=True)
        self._last_line = self.clock()

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            if self.clock() - self._last_line >= self.heartbeat_s:
                with self._lock:
                    several = len(self.trials) > 1
                    lines = ([self.status_line(), *(f"  {t}" for t in self.trial_lines())] if several else
                             [" · ".join(x for x in (self.status_line(), self.task_line()) if x)])
                for text in lines:
                    self._print(text)


def _task_text(task: tuple[str, int | None, int | None, dict[str, Any]] | None) -> str:
    """A command's progress as text: ``train 30/60 (loss 0.41, lr 1e-3, ETA 12 s)`` ('' for none)."""
    if task is None:
        return ""
    phase, done, total, detail = task
    count = f" {done}/{total}" if done is not None and total else ""
    extra = []
    if "loss" in detail:
        extra.append(f"loss {detail['loss']:.4g}")
    if "lr" in detail:
        extra.append(f"lr {detail['lr']:.2g}")
    if "eta_s" in detail:
        extra.append(f"ETA {format_duration(detail['eta_s'])}")
    return f"{phase}{count}" + (f" ({', '.join(extra)})" if extra else "")


def loop_label(loop: int, loop_n: int | None = None) -> str:
    """``loop 0 (1 of 3)``: loops are numbered from 0 everywhere (events, ``loop_<n>`` folders, report, UI, card,
    ``export --loop``); the console adds the count for people (docs/ui.md, Loop numbers)."""
    return f"loop {loop}" + (f" ({loop + 1} of {loop_n})" if loop_n else "")


def short_duration(seconds: float | None) -> str:
    """Step durations for people: tenths under a minute (``11.1 s``), else :func:`format_duration` (``3 min 12 s``).

    The console and the UI share it, so a step reads the same in both; ``None`` (not finished) is ``-``.
    """
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s" if seconds < 60 else format_duration(seconds)
