"""Notes and tags on runs: the store, the search language, and `mgpu-train runs`.

The Runs tab's side (the edit dialog, the search box) is in test_runs_panel_notes.py.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.search import RunQuery
from mgpu_gui.core.runs.store import RunRecord, RunState, RunStore
from mgpu_gui.core.runs.tags import check_tags, split_tags

FILES = Path(__file__).parent / "store_files"


@pytest.fixture
def store(tmp_path) -> RunStore:
    """The committed v4 store (runs 'digits', completed, and 'bad', failed), migrated."""
    path = tmp_path / "runs.sqlite3"
    shutil.copy(FILES / "runs-v4.sqlite3", path)
    with RunStore(path) as opened:
        yield opened


def ids(store: RunStore) -> dict[str, int]:
    return {r.name: r.id for r in store.runs()}


def test_tags_and_notes_are_kept_changed_and_go_with_their_run(store):
    digits, bad = ids(store)["digits"], ids(store)["bad"]
    assert store.tag(digits, ["lr-sweep", "baseline", "baseline"]).tags == ("baseline",
                                                                            "lr-sweep")
    assert store.tag(digits, ["lr-sweep", "never-had"], untag=True).tags == ("baseline",)
    assert store.set_tags(bad, ["data", "broken"]).tags == ("broken", "data")
    assert store.set_note(bad, "  b/3.png is truncated\nre-export it  ").note == (
        "b/3.png is truncated\nre-export it")
    assert store.set_note(bad, "").note == ""
    assert store.set_tags(bad, []).tags == ()
    assert [r.tags for r in store.runs()] == [(), ("baseline",)]
    store.delete(digits)
    assert store.database.db.execute("SELECT COUNT(*) FROM tags").fetchone()[0] == 0
    with pytest.raises(UserError, match="no run 999 .*`mgpu-train runs` lists"):
        store.set_note(999, "x")
    with pytest.raises(UserError, match="no run 999"):
        store.tag(999, ["x"])


def test_a_tag_is_one_word():
    assert split_tags("baseline, lr-sweep  seed1,,baseline") == ["baseline", "lr-sweep",
                                                                  "seed1"]
    assert check_tags([" a ", "b", "a"]) == ["a", "b"]
    for bad in ("two words", "a,b", ""):
        with pytest.raises(UserError, match="one word"):
            check_tags([bad])


def record(name: str, status: RunState = RunState.COMPLETED, *, tags: tuple[str, ...] = (),
           note: str = "", model: str = "/m/convnet.keras", data: str = "/d/cifar") -> RunRecord:
    return RunRecord(
        id=1, run_dir=Path("/runs") / name, name=name, model=model, data=data, status=status,
        message="", device_kind="gpu", devices=[], replicas=2, global_batch=64, epochs=4,
        epochs_done=4, created=0.0, started=None, ended=None, best_metric=None,
        best_value=None, best_epoch=None, test_metrics=None, attempts=1, note=note, tags=tags)


@pytest.mark.parametrize("text, shown", [
    ("", {"a", "b", "c"}),
    ("tag:baseline", {"a", "b"}),
    ("TAG:Baseline tag:seed1", {"b"}),
    ("status:failed", {"b"}),
    ("status:early status:failed", {"b", "c"}),
    ("status:early_stopped", {"c"}),
    ("lr", {"a", "c"}),  # a's note, c's tag
    ('note:"lr 1e-3"', {"a"}),
    ("model:resnet", {"c"}),
    ("data:cifar tag:baseline", {"a", "b"}),
    ("name:b", {"b"}),
    ("lr:0.1", {"a"}),  # no such key: plain text, found in the note
    ('note:"unclosed', set()),  # typed half-way: no error, and nothing matches the quote
])
def test_the_search_language(text, shown):
    runs = [record("a", tags=("baseline",), note="LR 1e-3 and lr:0.1"),
            record("b", RunState.FAILED, tags=("baseline", "seed1")),
            record("c", RunState.EARLY_STOPPED, tags=("lr-sweep",), model="/m/resnet.keras")]
    query = RunQuery.parse(text)
    assert {r.name for r in runs if query.matches(r)} == shown
    assert bool(query) is bool(text)


def cli_run(capsys, store: RunStore, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--store", str(store.path), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_notes_tags_json_and_filters(capsys, store):
    digits = str(ids(store)["digits"])
    assert cli_run(capsys, store, "runs", "tag", digits, "baseline,lr-sweep", "demo") == (
        0, "Run 1 (digits): tags baseline, demo, lr-sweep.\n", "")
    assert cli_run(capsys, store, "runs", "tag", "digits", "demo", "--untag")[1] == (
        "Run 1 (digits): tags baseline, lr-sweep.\n")
    assert cli_run(capsys, store, "runs", "note", "bad", "b/3.png is truncated")[1] == (
        "Run 2 (bad): note set.\n")
    code, out, _ = cli_run(capsys, store, "runs", "--json")
    listed = {r["name"]: r for r in json.loads(out)}
    assert (listed["digits"]["tags"], listed["digits"]["note"]) == (["baseline", "lr-sweep"], "")
    assert (listed["bad"]["tags"], listed["bad"]["note"]) == ([], "b/3.png is truncated")
    code, out, _ = cli_run(capsys, store, "runs")
    assert "TAGS" in out.splitlines()[0] and "baseline,lr-sweep" in out
    for flags, names in ((["--tag", "baseline"], ["digits"]), (["--status", "failed"], ["bad"]),
                         (["--search", "truncated"], ["bad"]),
                         (["--search", "status:completed lr", "--tag", "baseline"], ["digits"]),
                         (["--tag", "baseline", "--status", "failed"], [])):
        code, out, _ = cli_run(capsys, store, "runs", "--json", *flags)
        assert [r["name"] for r in json.loads(out)] == names, flags
    assert cli_run(capsys, store, "runs", "--tag", "nothing")[1] == (
        "No run matches; `mgpu-train runs` lists them all.\n")
    assert cli_run(capsys, store, "runs", "note", digits, "")[1] == (
        "Run 1 (digits): note cleared.\n")


@pytest.mark.parametrize("args", [("note", "999", "x"), ("tag", "999", "x"),
                                  ("tag", "nosuchrun", "x")])
def test_cli_says_which_run_is_unknown_without_a_traceback(capsys, store, args):
    code, out, err = cli_run(capsys, store, "runs", *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and "Traceback" not in err
    assert args[1] in err and "mgpu-train runs" in err


def test_cli_refuses_a_quoted_tag_with_spaces_instead_of_making_several(capsys, store):
    """A tag is one word, and one argument one tag: "tag with space" made three tags
    without a word (issue 29, item 14); it is refused, naming it, and nothing is tagged."""
    code, out, err = cli_run(capsys, store, "runs", "tag", "1", "ok", "tag with space")
    assert (code, out) == (2, "")
    assert "'tag with space' is not" in err and "separate words" in err, err
    assert store.get(1).tags == ()


@pytest.fixture
def local_time_plus_3(monkeypatch):
    """Local time 3 hours ahead of UTC (a POSIX TZ rule: no time zone files needed)."""
    monkeypatch.setenv("TZ", "XYZ-3")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_cli_export_writes_the_stores_epochs_and_the_runs_settings(capsys, store, tmp_path,
                                                                   local_time_plus_3):
    """A row per run and epoch, equal to the store's rows (floats read back exactly); each
    epoch numbered from 1 and its end in local ISO 8601 time (issue 30, item 9)."""
    import csv
    from datetime import datetime

    from mgpu_gui.core.events import EpochEnd

    cli_run(capsys, store, "runs", "tag", "digits", "baseline")
    out_file = tmp_path / "runs.csv"
    code, out, err = cli_run(capsys, store, "runs", "export", "digits", "2", "-o", str(out_file))
    with open(out_file, newline="") as handle:
        rows = list(csv.DictReader(handle))
    expected = [(record, event) for record in (store.get(1), store.get(2))
                for event in store.series_events(record.id, batches=False)
                if isinstance(event, EpochEnd)]
    assert (code, err) == (0, "")
    assert out == f"Wrote {len(expected)} epoch row(s) of 2 run(s) to {out_file}.\n"
    assert len(rows) == len(expected) > 0
    for row, (record, event) in zip(rows, expected, strict=True):
        assert (int(row["run_id"]), row["run_name"], row["status"]) == (
            record.id, record.name, record.status.value)
        assert (int(row["epoch"]), float(row["ended_unix_s"]), float(row["learning_rate"])) == (
            event.epoch + 1, event.t, event.learning_rate)  # epochs from 1, as the app shows
        assert row["ended_local_iso"].endswith("+03:00")
        ended = datetime.fromisoformat(row["ended_local_iso"])
        assert abs(ended.timestamp() - event.t) < 1  # the same instant, to the second
        assert {name: float(row[name]) for name in event.metrics} == event.metrics
        config = store.config(record.id)
        assert row["setting.learning_rate"] == str(config.learning_rate)
        assert row["setting.image_size"] == json.dumps(list(config.image_size))
        assert row["setting.early_stopping.patience"] == str(config.early_stopping.patience)
    assert rows[0]["tags"] == "baseline" and rows[0]["epoch"] == "1"
    code, _, err = cli_run(capsys, store, "runs", "export", "1", "-o",
                           str(tmp_path / "missing" / "x.csv"))
    assert code == 2 and err.startswith("error: cannot write ") and "Traceback" not in err
