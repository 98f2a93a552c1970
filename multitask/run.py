"""The run folder: the one owner of everything a run writes and reads.

What a run folder holds::

    runs/<name>/
        config.json              the resolved settings, flat: {flag name: value}
        metrics.jsonl            one line per evaluation: step, epoch, each task's metric, overall
        train_log.jsonl          one line per task every --log_every steps: mean training loss
        last.pt                  everything needed to resume (torch, plain tensors and containers)
        best.safetensors         the trained tensors at the best evaluation
        task-<name>.safetensors  one task's plug-ins + head (plug-in and pretrain runs)
        <task>-<split>-output.csv  predictions in the course's format
        parameters.json, skipped_rows.txt, summary.json, learning_curves.png
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minbert.checkpoint import (
    atomic_save,
    atomic_write_text,
    load_tensors,
    load_trusted,
    save_tensors,
)
from minbert.flags import unflatten
from multitask import extras
from multitask.errors import HELD, UsageError
from multitask.model import MultitaskModel
from multitask.state import TrainingState


@dataclass(frozen=True)
class Layout:
    """What a command keeps in its run folder: its own name (for messages), the files that make
    a folder hold one of its runs (refused without --resume or --overwrite), the other files it
    writes (an --overwrite removes these too, so nothing stale stays), and its logs (JSON lines,
    cut back to the step of last.pt on resume)."""

    command: str
    state: tuple[str, ...]
    outputs: tuple[str, ...]
    logs: tuple[str, ...]


# What the extras that report write (multitask/extras.py: ``Extra.writes``), in folders of their
# own: an output of every command that offers reporting.
REPORTS = extras.written(reporting_only=True)

DRIVER = Layout(
    command="train_multitask.py",
    state=(
        "config.json",
        "last.pt",
        "best.safetensors",
        "summary.json",
        "metrics.jsonl",
        "train_log.jsonl",
    ),
    outputs=(
        "parameters.json",
        "skipped_rows.txt",
        "learning_curves.png",
        "*-output.csv",
        "task-*.safetensors",
        *extras.written(),  # the extras' files (their teacher outputs, their reports)
    ),
    logs=("metrics.jsonl", "train_log.jsonl"),
)


EXPORT_MARK = "export.json"  # what an export writes into every folder it makes


def folder_kind(path: Path) -> str | None:
    """What an existing folder is, in words, when it holds something no other command may write
    over (a run of the driver or of MLM pretraining, an export, a checkpoint), else None."""
    if not path.is_dir():
        return None
    if (path / "mlm_config.json").is_file():
        return "an MLM pretraining run folder"
    if (path / EXPORT_MARK).is_file():
        return "an export of a run"
    if any((path / name).exists() for name in DRIVER.state if name != "config.json"):
        return "a train_multitask.py run folder"
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and "option" in config:
        return "a train_multitask.py run folder"
    weights = ("config.json", "model.safetensors", "pytorch_model.bin", "vocab.txt")
    if any((path / name).is_file() for name in weights):
        return "a checkpoint folder"
    return None


ASIDE = ".replaced.tmp"  # the suffix of a file --overwrite has set aside (``replace``)


def replace(paths: list[Path]) -> None:
    """Remove ``paths`` (files and links) all or none: each is first renamed aside in its own
    folder; where one cannot be (a read-only folder, Ctrl-C), those set aside are put back, and
    the error names the file; only once all are aside are they removed."""
    aside: list[tuple[Path, Path]] = []
    try:
        for path in paths:
            moved = path.with_name(f".{path.name}{ASIDE}")
            try:
                path.rename(moved)
            except OSError as err:  # named as the file the run could not remove
                raise OSError(err.errno, err.strerror, str(path)) from None
            aside.append((path, moved))
    except BaseException:
        for path, moved in reversed(aside):
            moved.rename(path)
        raise
    for _, moved in aside:
        moved.unlink(missing_ok=True)


def overlapping(a: Path, b: Path) -> bool:
    """Whether two folders are the same or one lies inside the other."""
    a, b = a.resolve(), b.resolve()
    return a == b or b in a.parents or a in b.parents


def merge_config(
    command_line: dict[str, Any],
    saved: dict[str, Any],
    inherited: Iterable[str],
    defaults: dict[str, Any],
    flag: str = "--resume",
    source: str = "",
) -> dict[str, Any]:
    """The settings of a command that reads a saved run (``flag``: --resume, --evaluate or
    --add_to, naming ``source``), all flat ``{flag: value}`` dicts.

    A key in ``inherited`` takes the saved run's value; a key the saved run predates (a flag
    added since) takes the default a command line without flags has, so that it resolves as it
    would have then; every other key comes from the command line. A flag given on the command
    line (not at its default) that would change an inherited setting is refused, never ignored.
    Option-dependent defaults are resolved afterwards, once, by the caller.
    """
    merged = dict(command_line)
    for key in inherited:
        merged[key] = saved[key] if key in saved else defaults[key]
        given = command_line[key] if key in command_line else defaults[key]
        if given != defaults[key] and given != merged[key]:
            raise UsageError(
                f"--{key} {given}: the run in {source} has {merged[key]}, and {flag} takes the "
                f"run's setting; drop --{key} (or start a new run to change it)"
            )
    return merged


class RunFolder:
    """One run's folder. ``writes`` is False in every process but the first of a distributed run:
    then the writing methods do nothing, and reading still works."""

    def __init__(self, path: str | Path, writes: bool = True, layout: Layout = DRIVER) -> None:
        self.path = Path(path)
        self.writes = writes
        self.layout = layout

    def file(self, name: str) -> Path:
        return self.path / name

    # -- set-up ---------------------------------------------------------------------------------

    def check_can_start(self, resume: bool, overwrite: bool) -> None:
        """Before anything is written: --resume needs a resumable run here; a new run needs a
        folder that holds no run, or --overwrite."""
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"--out_dir {self.path} is a file, not a folder; give a folder")
        if resume:
            if not self.file("last.pt").is_file():
                raise UsageError(f"--resume: {self.file('last.pt')} not found; nothing to resume")
            return
        if foreign := self.foreign_entries():
            kind = folder_kind(self.path)
            what = f"is {kind}, not a run of {self.layout.command}"
            if kind is None or self.layout.command in kind:  # its own kind, with other files
                what = (
                    f"holds files no run of {self.layout.command} writes ({', '.join(foreign[:3])})"
                )
            raise UsageError(
                f"--out_dir {self.path} {what}; it is left as it is (--overwrite included): "
                "choose a new or empty --out_dir"
            )
        held = [name for name in self.layout.state if self.file(name).exists()]
        if held and not overwrite:
            raise UsageError(
                f"--out_dir {self.path} already holds a run ({', '.join(held)}); pass --resume to "
                "continue it, --overwrite to replace it, or another --out_dir"
            )
        self.earlier_run()  # a folder where the run writes a file is refused now

    def foreign_entries(self) -> list[str]:
        """The names in the folder that this command's runs never write (sorted); a folder the
        run writes into (an extra's reports) is its own, whatever else it holds."""
        if not self.path.is_dir():
            return []
        names = (*self.layout.state, *self.layout.outputs, *self.layout.logs, ".lock", ".*.tmp")
        own = [pattern.split("/")[0] for pattern in names]
        return sorted(
            p.name
            for p in self.path.iterdir()
            if not any(fnmatch.fnmatchcase(p.name, pattern) for pattern in own)
        )

    def start(self, resume: bool) -> None:
        """Once the whole command is validated: take the folder's lock (one process per run
        folder), remove temporary files of an interrupted save, and for a new run remove every
        file of the run it replaces."""
        if not self.writes:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.file(".lock"), "a+")  # noqa: SIM115 -- held while the run lives
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.seek(0)
            owner = self._lock.read().strip() or "another process"
            raise UsageError(
                f"--out_dir {self.path} is in use by {owner}; wait for it to finish or choose "
                "another --out_dir"
            ) from None
        self._lock.truncate(0)
        self._lock.write(f"process {os.getpid()}\n")
        self._lock.flush()
        HELD.append(self._lock)  # released when the command ends (multitask.errors.run_command)
        for path in self.stale():
            path.unlink(missing_ok=True)
        if not resume:
            replace(self.earlier_run())

    def stale(self) -> list[Path]:
        """Temporary files of an interrupted save or --overwrite (``replace``'s set-aside names),
        in the folder and in its own real folders (an extra's reports; never through a link)."""
        found = list(self.path.glob(".*.tmp"))
        for head in {p.split("/")[0] for p in self.layout.outputs if "/" in p}:
            if self.file(head).is_dir() and not self.file(head).is_symlink():
                found += self.file(head).glob(f".*{ASIDE}")
        return [path for path in found if path.is_symlink() or not path.is_dir()]

    def earlier_run(self) -> list[Path]:
        """What an --overwrite removes: every file of the layout's (a link as a link); an own
        folder (an extra's reports) that is a link is removed as the link, never followed. A folder
        where a file of the run goes is refused: it is not the run's to remove."""
        found = []
        for pattern in (*self.layout.state, *self.layout.outputs):
            head, _, rest = pattern.partition("/")
            if rest and self.file(head).is_symlink():
                found.append(self.file(head))
            elif not rest or self.file(head).is_dir():
                found += self.path.glob(pattern)
        found = sorted(set(found))
        if folders := [p for p in found if p.is_dir() and not p.is_symlink()]:
            raise UsageError(
                f"--out_dir {self.path}: {folders[0]} is a folder where {self.layout.command} "
                "writes a file, so --overwrite leaves the run as it is: move it away"
            )
        return found

    def on_disk(self) -> str:
        """What a resume would continue from, in words."""
        if not self.file("last.pt").is_file():
            return f"{self.path} holds no resumable state yet (no evaluation or save was reached)"
        step = "?" if self.saved_step is None else self.saved_step
        return (
            f"{self.file('last.pt')} (step {step}) is on disk; resume with: python "
            f"{self.layout.command} --out_dir {self.path} --resume"
        )

    def write_config(self, flat: dict[str, Any]) -> None:
        self.write_json("config.json", flat)

    def read_config(self, flag: str) -> dict[str, Any]:
        """The run's config.json; ``flag`` names the option that pointed here, for messages. A
        folder of another kind (a checkpoint, an MLM pretraining run) is named as such."""
        kind = folder_kind(self.path)
        if kind and "train_multitask.py" not in kind:
            raise UsageError(f"{flag} {self.path} is {kind}, not a train_multitask.py run folder")
        return self.read_json("config.json", flag)

    def read_settings(
        self, cls: type, flag: str, name: str = "config.json", required: Iterable[str] = ()
    ) -> dict[str, Any]:
        """A saved settings file (flat ``{flag: value}``) whose ``required`` keys are present and
        whose every value has its flag's type and range (``cls``: the settings dataclass);
        anything else is "corrupted", with the file named."""
        saved = self.read_config(flag) if name == "config.json" else self.read_json(name, flag)
        path = self.file(name)
        if missing := [key for key in required if key not in saved]:
            raise UsageError(f"{flag}: {path} is corrupted (no {', '.join(missing)})")
        try:
            unflatten(cls, saved)
        except (ValueError, TypeError) as err:
            raise UsageError(f"{flag}: {path} is corrupted ({err})") from None
        return saved

    def chain(self, flag: str = "--add_to") -> list[RunFolder]:
        """This run and the runs it was added to (--add_to), newest first; a chain that loops, or
        an add_to that is not a folder name, is corrupted."""
        folders: list[RunFolder] = [self]
        while earlier := folders[-1].read_config(flag).get("add_to"):
            path = folders[-1].file("config.json")
            if not isinstance(earlier, str):
                raise UsageError(f"{flag}: {path} is corrupted (add_to {earlier!r})")
            if any(Path(earlier).resolve() == f.path.resolve() for f in folders):
                raise UsageError(
                    f"{flag}: {path} is corrupted: its add_to chain loops back to {earlier}"
                )
            folders.append(RunFolder(earlier))
        return folders

    def read_json(self, name: str, flag: str) -> dict[str, Any]:
        """A JSON object the run wrote; a missing or corrupted file is a UsageError."""
        path = self.file(name)
        if not path.is_file():
            raise UsageError(f"{flag}: {path} not found; pass the folder of a training run")
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UsageError(f"{flag}: {path} is corrupted (not valid JSON: {err})") from None
        if not isinstance(config, dict):
            raise UsageError(f"{flag}: {path} is corrupted (not a JSON object)")
        return config

    # -- logs -----------------------------------------------------------------------------------

    def log_training(self, step: int, epoch: int, means: dict[str, float]) -> None:
        """A line per task with its mean loss since the last line (``LossLog.line``)."""
        records = [{"step": step, "epoch": epoch, "task": k, "loss": v} for k, v in means.items()]
        self.append_log("train_log.jsonl", records)

    def log_metrics(self, step: int, epoch: int, metrics: dict[str, float]) -> None:
        self.append_log("metrics.jsonl", [{"step": step, "epoch": epoch, **metrics}])

    def read_log(self, name: str, keys: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The records of a JSON-lines log; each must be an object with an integer ``step`` and
        the ``keys`` its reader needs, or the log is corrupted (the line named)."""
        path = self.file(name)
        if not path.exists():
            return []
        records = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            step = record.get("step") if isinstance(record, dict) else None
            if (
                not isinstance(step, int)
                or isinstance(step, bool)
                or any(k not in record for k in keys)
            ):
                raise UsageError(f"{path}:{number}: corrupted (not a JSON record with its step)")
            records.append(record)
        return records

    def truncate_logs(self, step: int) -> None:
        """After a resume, drop the log lines written after the checkpoint it continues from."""
        for name in self.layout.logs:
            if self.writes and self.file(name).exists():
                kept = [r for r in self.read_log(name) if r["step"] <= step]
                atomic_write_text(self.file(name), "".join(json.dumps(r) + "\n" for r in kept))

    # -- checkpoints ----------------------------------------------------------------------------

    saved_step: int | None = None  # the step of last.pt on disk, once known

    def save_last(self, state: TrainingState, parts: dict[str, Any]) -> None:
        """last.pt: everything that resuming at ``state.step`` needs: the trained tensors, the
        optimizer and schedule, each batch stream's position, the random state (CPU and CUDA),
        SMART's teacher, and the training state (``multitask/state.py``). ``parts`` as
        ``resume`` takes them. The caller checks the weights are finite first
        (``FiniteWeights``, multitask/step.py)."""
        if not self.writes:
            return
        saved = {
            "model": parts["model"].trainable_state_dict(),
            "optimizer": parts["optimizer"].state_dict(),
            "scheduler": parts["scheduler"].state_dict(),
            "streams": {name: s.state_dict() for name, s in parts["streams"].items()},
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            **state.saved(),
        }
        if parts["teacher"] is not None:
            saved["teacher"] = parts["teacher"].state_dict()
        self.save_state(saved, state.step)

    def save_state(self, state: dict[str, Any], step: int) -> None:
        """last.pt, written atomically: what a resume at ``step`` continues from."""
        if self.writes:
            atomic_save(state, self.file("last.pt"))
            self.saved_step = step

    def load_state(self) -> dict[str, Any]:
        """last.pt as ``save_state`` wrote it (through the one safe loader)."""
        return load_trusted(self.file("last.pt"))

    def resume(self, parts: dict[str, Any], train_files: dict[str, str]) -> TrainingState:
        """Put last.pt back into the parts built as at the start; the training state it holds,
        whose training files' fingerprints must equal ``train_files`` (the files now: one that
        changed would make the resumed run another run)."""
        path = self.file("last.pt")
        saved = self.load_state()
        try:
            parts["model"].load_state_dict(saved["model"], strict=False)
            parts["optimizer"].load_state_dict(saved["optimizer"])
            parts["scheduler"].load_state_dict(saved["scheduler"])
            for name, stream_state in saved["streams"].items():
                parts["streams"][name].load_state_dict(stream_state)
            if parts["teacher"] is not None:
                parts["teacher"].load_state_dict(saved["teacher"])
            torch.set_rng_state(saved["rng"])
            state = TrainingState.from_saved(saved)
        except (KeyError, ValueError, RuntimeError, TypeError, AttributeError) as err:
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UsageError(
                f"{path} does not belong to the run configured in {self.file('config.json')} "
                f"(it was saved by another run or another version: {message})"
            ) from None
        if saved.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])  # dropout on the GPU draws from these
        for file, digest in state.train_files.items():
            if train_files.get(file) != digest:
                raise UsageError(
                    f"{file} changed since the run started (its sha256 differs): resuming would "
                    "not continue the same run; restore the file, or start a new run"
                )
        state.train_files = dict(train_files)
        self.saved_step = state.step
        self.truncate_logs(state.step)
        print(f"resumed {self.path} at step {state.step}")
        return state

    def save_best(self, model: MultitaskModel) -> None:
        if self.writes:
            save_tensors(model.trainable_state_dict(), self.file("best.safetensors"))

    def load_best(
        self, model: MultitaskModel, flag: str = "--evaluate", fit: str = "exact"
    ) -> dict[str, torch.Tensor]:
        """Load best.safetensors over ``model`` and return the tensors loaded; ``flag`` names the
        option that pointed here, for messages; ``fit`` is how the file must fit the model:

            exact    the model's trainable tensors, no more, no fewer (--evaluate: a model built
                     from the run's config.json)
            within   each of the file's tensors is one of the model's (--add_to: more tasks)
            overlap  the tensors the model has; the rest stay out (--init_from: the encoder and
                     the heads of the tasks both have)
        """
        state, own = self._read_best(flag), model.state_dict()
        kept = {k: v for k, v in state.items() if fit != "overlap" or k in own}
        if fit == "exact":
            expected = model.trainable_state_dict()
            wrong = sorted(
                k
                for k in set(kept) | set(expected)
                if k not in kept or k not in expected or kept[k].shape != expected[k].shape
            )
        else:
            wrong = [k for k, v in kept.items() if k not in own or own[k].shape != v.shape]
        if wrong:
            raise UsageError(self.misfit(flag, fit, wrong))
        model.load_state_dict(kept, strict=False)
        if fit == "overlap":
            heads = sorted({k.split(".")[1] for k in kept if k.startswith("heads.")})
            print(
                f"started from {self.file('best.safetensors')}: {len(kept)} of its {len(state)} "
                f"tensors (the encoder, and the heads of {', '.join(heads) or 'no task'})"
            )
        return kept

    def misfit(self, flag: str, fit: str, wrong: list[str]) -> str:
        """What a best.safetensors that does not fit the model says (``load_best``)."""
        path = self.file("best.safetensors")
        if fit == "exact":
            return (
                f"{path} does not match the model built from {self.file('config.json')}: "
                f"{len(wrong)} tensors differ in name or shape, e.g. {wrong[0]}"
            )
        return f"{flag}: {path} does not fit the model, e.g. tensor {wrong[0]}"

    def load_into(self, model: MultitaskModel) -> None:
        """``--add_to``: load this run's trained tensors, and those of the runs it was itself
        added to, into a model that holds their tasks and more. Each run's best.safetensors must
        hold every tensor of the tasks it trained (their plug-ins and heads): one it lacks would
        stay at its random start, frozen, without a word."""
        for folder in [*reversed(self.chain()[1:]), self]:
            loaded = folder.load_best(model, "--add_to", fit="within")
            tasks = folder.read_config("--add_to").get("tasks")
            if not isinstance(tasks, list) or not all(t in model.heads for t in tasks):
                raise UsageError(f"--add_to: {folder.file('config.json')} is corrupted (tasks)")
            wanted = set().union(*(model.task_keys(task) for task in tasks))
            if missing := sorted(wanted - set(loaded)):
                raise UsageError(
                    f"--add_to: {folder.file('best.safetensors')} lacks {len(missing)} tensors "
                    f"of the tasks {folder.path} trained ({', '.join(tasks)}), e.g. "
                    f"{', '.join(missing[:3])}; it was not written by that run"
                )

    def save_task_checkpoints(self, model: MultitaskModel) -> None:
        """task-<name>.safetensors: one task's plug-ins + head, loadable onto the pretrained
        encoder."""
        for name in model.tasks:
            path = self.file(f"task-{name}.safetensors")
            state = model.task_state_dict(name)
            if self.writes:
                save_tensors(state, path)
                count = sum(t.numel() for t in state.values())
                print(f"{path}: {count:,} parameters, {path.stat().st_size / 1024:.1f} KiB")

    def _read_best(self, flag: str) -> dict:
        path = self.file("best.safetensors")
        if not path.is_file():
            raise UsageError(f"{flag}: {path} not found: {self.path} never reached an evaluation")
        return load_tensors(path)

    # -- outputs --------------------------------------------------------------------------------

    def write_parameters(self, report: dict[str, Any]) -> None:
        self.write_json("parameters.json", report)

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write_json("summary.json", summary)

    def write_skipped_rows(self, report: str) -> Path:
        if self.writes:
            atomic_write_text(self.file("skipped_rows.txt"), report + "\n")
        return self.file("skipped_rows.txt")

    def write_json(self, name: str, value: Any) -> None:
        if self.writes:
            atomic_write_text(self.file(name), json.dumps(value, indent=2) + "\n")

    def append_log(self, name: str, records: list[dict[str, Any]]) -> None:
        """Add JSON lines to the log ``name`` (one of the layout's logs)."""
        if self.writes and records:
            with open(self.file(name), "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in records))
