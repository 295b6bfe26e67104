"""Every store an earlier release wrote opens in this one with nothing lost
(`tests/store_files/runs-vN.sqlite3`, one per released schema version)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mgpu_gui.core.evaluation.metrics import ClassifierMetrics, Scores
from mgpu_gui.core.evaluation.result import EvaluationResult, Split
from mgpu_gui.core.runs import storedb
from mgpu_gui.core.runs.queue import JobQueue
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.runs.telemetry_store import (
    TelemetryDevice,
    TelemetrySample,
    read_telemetry,
    record_devices,
    record_samples,
)

FILES = Path(__file__).parent / "store_files"


def test_there_is_a_store_file_of_every_earlier_version():
    versions = sorted(int(p.stem.split("-v")[1]) for p in FILES.glob("runs-v*.sqlite3"))
    assert versions == list(range(1, storedb.SCHEMA_VERSION))


@pytest.mark.parametrize("version", range(1, storedb.SCHEMA_VERSION))
def test_an_earlier_store_opens_with_its_runs_epochs_and_queue(tmp_path, version):
    path = tmp_path / "runs.sqlite3"
    shutil.copy(FILES / f"runs-v{version}.sqlite3", path)
    with RunStore(path) as store:
        assert store.database.db.execute("PRAGMA user_version").fetchone()[0] == (
            storedb.SCHEMA_VERSION)
        runs = {r.name: r for r in store.runs()}
        assert runs["digits"].status is RunState.COMPLETED and runs["digits"].epochs_done == 2
        assert store.epoch_numbers(runs["digits"].id) == [0, 1]
        # A failure recorded before v3 could not say whether resuming helps: it may.
        assert runs["bad"].resume_helps is (version < 3)
        assert [j.name for j in JobQueue(store).jobs()] == (["overnight"] if version >= 2
                                                            else [])
        # Kept since v4; a later version keeps it too.
        assert (store.evaluation(runs["digits"].id) is not None) is (version >= 4)
        # Notes and tags since v5.
        assert (runs["bad"].note, runs["digits"].tags) == (
            ("b/3.png is truncated", ("baseline", "demo")) if version >= 5 else ("", ()))
        assert store.set_note(runs["bad"].id, "b/3.png is truncated").note == (
            "b/3.png is truncated")
        assert store.tag(runs["digits"].id, ["baseline", "demo"]).tags == ("baseline", "demo")
        result = evaluation()
        store.save_evaluation(runs["digits"].id, result)
        assert store.evaluation(runs["digits"].id, Split.TEST) == result
        # No run had telemetry before v6; a stored run can get it now.
        database, run_id = store.database, runs["digits"].id
        kept = read_telemetry(database, run_id)
        assert {d: len(s) for d, s in kept.samples.items()} == ({0: 3, 1: 3} if version >= 6
                                                                 else {})
        record_devices(database, run_id, [TelemetryDevice(0, "GPU-0", "Fake", 81920)])
        record_samples(database, run_id, [TelemetrySample(0, 1700000000.5, 97, 61000, 312, 71)])
        read = read_telemetry(database, run_id)
        assert read.devices[0].name == "Fake" and [1700000000.5, 97, 61000, 312, 71] in (
            read.samples[0].tolist())


def test_an_evaluation_replaces_the_earlier_one_of_its_split_and_goes_with_its_run(tmp_path):
    path = tmp_path / "runs.sqlite3"
    shutil.copy(FILES / f"runs-v{storedb.SCHEMA_VERSION - 1}.sqlite3", path)
    with RunStore(path) as store:
        run_id = next(r.id for r in store.runs() if r.name == "digits")
        store.save_evaluation(run_id, evaluation(samples=10))
        store.save_evaluation(run_id, evaluation(samples=20))
        store.save_evaluation(run_id, evaluation(samples=5, split=Split.VALIDATION))
        assert store.evaluation(run_id, Split.TEST).samples == 20
        assert store.evaluation(run_id, Split.VALIDATION).samples == 5
        store.delete(run_id)
        assert store.evaluation(run_id) is None


def evaluation(samples: int = 4, split: Split = Split.TEST) -> EvaluationResult:
    scores = Scores(0.5, 0.5, 0.5, samples // 2)
    return EvaluationResult(
        model="/runs/model.keras", data="demo", split=split, samples=samples, loss=0.7,
        classifier=ClassifierMetrics(("a", "b"), ((1, 1), (1, 1)), (scores, scores),
                                     scores, scores, 0.5, None, samples))


def test_a_read_only_store_of_an_earlier_version_says_it_needs_writing_once(tmp_path):
    path = tmp_path / "runs.sqlite3"
    shutil.copy(FILES / f"runs-v{storedb.SCHEMA_VERSION - 1}.sqlite3", path)
    with pytest.raises(storedb.StoreError, match="is read-only and from an earlier mgpu-gui"):
        RunStore(path, read_only=True)
