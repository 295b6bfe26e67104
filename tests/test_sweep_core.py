"""Sweeps' core, no Qt, store or training: the search space, trials, the median stopping
rule, the estimate, and the results table and plot data, from hand-made curves."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest

from mgpu_gui.core.config import DeviceKind, LRScalingConfig, RunConfig
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.runs.compare import ComparedRun, Direction
from mgpu_gui.core.sweeps.estimate import PastRun, estimate
from mgpu_gui.core.sweeps.median import MEDIAN_STOPPED, median_verdict, median_verdicts
from mgpu_gui.core.sweeps.plots import parallel_data, scatter_data
from mgpu_gui.core.sweeps.results import TrialOutcome, TrialStatus, sweep_results
from mgpu_gui.core.sweeps.space import Scale, parse_parameter, sweepable, value_of
from mgpu_gui.core.sweeps.trials import Search, SweepSpec, Trial, plan_trials, trial_problems

BASE = RunConfig(epochs=3, seed=42)


def param(name: str, text: str, base: RunConfig = BASE):
    return parse_parameter(name, text, base)


def grid(*parameters, **options) -> SweepSpec:
    return SweepSpec(BASE, tuple(param(n, t) for n, t in parameters), **options)


def problems(name: str, text: str, base: RunConfig = BASE) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_parameter(name, text, base)
    return caught.value.problems


# -- the search space -------------------------------------------------------------------------

def test_sweepable_settings_are_runconfigs_one_value_fields():
    found = sweepable()
    for name in ("learning_rate", "batch_per_replica", "epochs", "optimizer", "devices.replicas",
                 "devices.kind", "early_stopping.patience", "precision", "fine_tune_lr"):
        assert value_of(RunConfig(), name) == found[name].default
    # Repeats vary the seed; where a run reports, lists and consent are never swept.
    for name in ("seed", "run_name", "output_dir", "metrics", "image_size", "devices.gpus",
                 "allow_unsafe_code", "on_finish"):
        assert name not in found
    assert found["optimizer"].choices[:2] == ("adam", "adamw")
    assert found["jit_compile"].choices == (False, True)
    assert found["devices.kind"].choices == tuple(DeviceKind)


def test_values_are_parsed_by_their_settings_type():
    assert param("learning_rate", "1e-3,3e-3").values == (0.001, 0.003)
    log = param("learning_rate", "log:1e-4..1e-2:5")
    assert (log.scale, log.values) == (Scale.LOG, (1e-4, 0.000316228, 1e-3, 0.00316228, 1e-2))
    assert param("batch_per_replica", "lin:16..64:4").values == (16, 32, 48, 64)
    assert param("batch_per_replica", "log:16..256:5").values == (16, 32, 64, 128, 256)
    assert param("jit_compile", "on,off").values == (True, False)
    assert param("optimizer", "adam,sgd").values == ("adam", "sgd")
    assert param("devices.kind", "cpu,gpu").values == (DeviceKind.CPU, DeviceKind.GPU)
    assert param("fine_tune_lr", "none,1e-4").values == (None, 1e-4)
    # Written back as read: a stored sweep parses to the same parameter.
    for name, text in (("learning_rate", "log:1e-4..1e-2:5"), ("epochs", "lin:2..8:4"),
                       ("learning_rate", "1e-3,3e-3"), ("jit_compile", "on,off"),
                       ("devices.kind", "cpu,gpu"), ("fine_tune_lr", "none,1e-4")):
        parsed = param(name, text)
        assert param(name, parsed.text) == parsed


def test_augmentation_is_swept_on_and_off_where_the_data_are_images(tmp_path):
    images = BASE.replace(data=str(tmp_path))
    augment = param("augment", "off;flip,rotate=0.1", images)
    assert augment.values == ("", "flip,rotate=0.1")
    assert param("augment", augment.text, images) == augment
    [(name, message)] = problems("augment", "off;flip", BASE)  # the demo's arrays
    assert name == "augment" and "image folder" in message


def test_a_bad_value_names_the_setting_and_the_value():
    assert problems("learning_rate", "1e-3,abc") == [("learning_rate", "'abc' is not a number")]
    [(name, message)] = problems("learning_rate", "1e-3,-1")
    assert name == "learning_rate" and "-1" in message and "positive" in message
    [(name, message)] = problems("optimizer", "adam,adamm")
    assert name == "optimizer" and "'adamm'" in message
    assert "'64.5'" in problems("batch_per_replica", "32,64.5")[0][1]
    assert "above 0" in problems("learning_rate", "log:0..1e-2:3")[0][1]
    assert "LOW below HIGH" in problems("learning_rate", "log:1e-2..1e-4:3")[0][1]
    assert "number setting" in problems("optimizer", "lin:1..3:3")[0][1]
    assert "twice" in problems("epochs", "2,2")[0][1]
    assert problems("seed", "1,2")[0][0] == "seed"  # repeats own the seed
    # Checked against the base config: a warm-up needs epochs after it.
    base = BASE.replace(epochs=10, lr_scaling=LRScalingConfig(enabled=True))
    [(name, message)] = problems("lr_scaling.warmup_epochs", "2,12", base)
    assert name == "lr_scaling.warmup_epochs" and "12" in message


# -- trials -----------------------------------------------------------------------------------

def test_a_grid_is_the_product_in_a_stable_order_with_repeats_seeded_apart():
    spec = grid(("learning_rate", "1e-3,3e-3"), ("batch_per_replica", "32,64"), repeats=2,
                gpus_per_trial=2)
    trials = plan_trials(spec)
    assert [t.index for t in trials] == list(range(8))
    assert [(t.values["learning_rate"], t.values["batch_per_replica"], t.repeat)
            for t in trials] == [(1e-3, 32, 0), (1e-3, 64, 0), (3e-3, 32, 0), (3e-3, 64, 0),
                                 (1e-3, 32, 1), (1e-3, 64, 1), (3e-3, 32, 1), (3e-3, 64, 1)]
    assert [t.seed for t in trials] == [42] * 4 + [43] * 4
    third = trials[2].config
    assert (third.learning_rate, third.batch_per_replica, third.epochs) == (3e-3, 32, 3)
    assert {t.config.devices.replicas for t in trials} == {2}
    assert plan_trials(spec) == trials  # stable
    # A swept GPU count wins over the GPUs per trial.
    swept = plan_trials(grid(("devices.replicas", "1,4"), gpus_per_trial=2))
    assert [t.config.devices.replicas for t in swept] == [1, 4]


def test_random_search_is_seeded_and_draws_log_ranges_log_uniformly():
    spec = grid(("learning_rate", "log:1e-4..1"), ("optimizer", "adam,sgd"),
                search=Search.RANDOM, samples=200, random_seed=7)
    trials = plan_trials(spec)
    assert plan_trials(spec) == trials
    other = plan_trials(dataclasses.replace(spec, random_seed=8))
    assert [t.values for t in other] != [t.values for t in trials]
    rates = [t.values["learning_rate"] for t in trials]
    assert len(trials) == 200 and all(1e-4 <= r <= 1 for r in rates)
    # Log-uniform: each decade as likely (uniform would put 99 % above 1e-2).
    assert 0.35 < sum(r < 1e-2 for r in rates) / len(rates) < 0.65
    assert {t.values["optimizer"] for t in trials} == {"adam", "sgd"}
    # A setting is drawn once: a space of 4 yields 4 trials, however many were asked for.
    small = grid(("epochs", "2,3"), ("optimizer", "adam,sgd"), search=Search.RANDOM, samples=9)
    assert sorted((t.values["epochs"], t.values["optimizer"]) for t in plan_trials(small)) == [
        (2, "adam"), (2, "sgd"), (3, "adam"), (3, "sgd")]


def test_extending_a_sweep_yields_only_the_new_trials():
    spec = grid(("learning_rate", "1e-3,3e-3"), ("batch_per_replica", "32,64"))
    first = plan_trials(spec)
    wider = spec.extended([param("learning_rate", "3e-3,1e-2")])
    assert wider.parameters[0].values == (1e-3, 3e-3, 1e-2)
    added = plan_trials(wider, first)
    assert [(t.index, t.values) for t in added] == [
        (4, {"learning_rate": 1e-2, "batch_per_replica": 32}),
        (5, {"learning_rate": 1e-2, "batch_per_replica": 64})]
    repeated = plan_trials(wider.extended(repeats=2), first + added)
    assert len(repeated) == 6 and {t.repeat for t in repeated} == {1}
    assert {t.seed for t in repeated} == {43}
    with pytest.raises(ConfigError, match="does not vary"):
        spec.extended([param("epochs", "5")])
    # Random: the first draws stay; only the extra draws are new.
    drawn = grid(("learning_rate", "log:1e-4..1e-2"), search=Search.RANDOM, samples=3)
    some = plan_trials(drawn)
    more = plan_trials(drawn.extended(samples=2), some)
    assert [t.index for t in more] == [3, 4]
    assert plan_trials(drawn.extended(samples=2))[:3] == some
    assert not {t.key for t in more} & {t.key for t in some}


def test_sweeps_and_trials_survive_json():
    spec = grid(("learning_rate", "log:1e-4..1e-2:3"), ("devices.kind", "cpu,gpu"), repeats=2,
                median_stop=True, max_parallel=2)
    assert SweepSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    # An extended range's points are uneven; they come back as they were.
    wider = spec.extended([param("learning_rate", "log:1e-2..0.5:2")])
    assert wider.parameters[0].values == (1e-4, 1e-3, 1e-2, 0.5)
    assert wider.parameters[0].text == "log:0.0001..0.5:4"
    assert SweepSpec.from_dict(json.loads(json.dumps(wider.to_dict()))) == wider
    trial = plan_trials(spec)[1]
    back = Trial.from_dict(json.loads(json.dumps(trial.to_dict())))
    assert back == trial and back.key == trial.key
    assert back.values["devices.kind"] is DeviceKind.GPU


def test_a_sweep_that_cannot_run_says_why():
    countless = SweepSpec(BASE, (param("learning_rate", "log:1e-4..1e-2"),))
    assert "count" in countless.problems()[0][1]
    assert [p[0] for p in grid(("epochs", "2"), search=Search.RANDOM).problems()] == ["samples"]
    assert grid(("epochs", "2"), gpus_per_trial=0).problems() == [
        ("gpus_per_trial", "must be at least 1, got 0")]
    # A compiled model file trains with its own optimizer: sweeping the LR needs Override.
    lr = grid(("learning_rate", "1e-3,1e-2"))
    assert lr.problems() == []
    [(name, message)] = lr.problems(compiled_model=True)
    assert name == "learning_rate" and "--override-compile" in message
    overridden = SweepSpec(BASE.replace(override_compile=True), lr.parameters)
    assert overridden.problems(compiled_model=True) == []
    # Values fine alone, not together: a warm-up of 5 in a 3-epoch trial.
    base = RunConfig(lr_scaling=LRScalingConfig(enabled=True, warmup_epochs=5))
    spec = SweepSpec(base, (param("epochs", "3,10", base),))
    [(name, message)] = trial_problems(spec, plan_trials(spec))
    assert name == "lr_scaling.warmup_epochs" and message.startswith("trial epochs=3 ")
    with pytest.raises(ConfigError):
        lr.check(compiled_model=True)


# -- the median stopping rule -----------------------------------------------------------------

def _run_side_by_side(curves: dict[int, list[float]], metric: str = "val_loss"):
    """Every trial trains epoch by epoch at once; the rule judges each after each epoch,
    as the queue runner does. Returns the verdicts and the curves as far as they got."""
    seen: dict[int, list[float]] = {key: [] for key in curves}
    stopped = {}
    for epoch in range(max(map(len, curves.values()))):
        running = [k for k in curves if k not in stopped and epoch < len(curves[k])]
        for key in running:
            seen[key].append(curves[key][epoch])
        stopped |= median_verdicts(seen, running, metric)
    return stopped, seen


def test_median_rule_stops_the_clearly_worse_of_four_trials_after_the_grace():
    # The good ones tie: of four trials, one consistently behind the second best would
    # be stopped too (the median of the three others).
    good = [[1.0 - 0.1 * e for e in range(6)]] * 3
    worse = [1.5 - 0.05 * e for e in range(6)]
    stopped, seen = _run_side_by_side({0: good[0], 1: good[1], 2: good[2], 3: worse})
    assert list(stopped) == [3]
    verdict = stopped[3]
    assert verdict.epoch == 2 and len(seen[3]) == 3  # grace of 2 epochs, judged at the third
    assert verdict.text == MEDIAN_STOPPED == "stopped early (median rule)"
    assert verdict.best == pytest.approx(1.4)
    assert verdict.median == pytest.approx(statistics.median(c[2] for c in good))
    assert verdict.others == 3 and "median" in verdict.reason
    assert all(len(seen[k]) == 6 for k in range(3))


def test_median_rule_stops_nothing_with_two_trials_or_too_few_reports():
    stopped, _ = _run_side_by_side({0: [0.5] * 5, 1: [3.0] * 5})
    assert stopped == {}
    # Three others exist but only two reached the epoch judged.
    others = [[0.5, 0.4, 0.3], [0.5, 0.4, 0.3], [0.5, 0.4]]
    assert median_verdict([2.0, 2.0, 2.0], others, "val_loss") is None
    assert median_verdict([2.0, 2.0, 2.0], others[:2] + [[0.5, 0.4, 0.3]], "val_loss")
    # A grace under 2 epochs is not allowed: nothing is judged before the third epoch.
    assert median_verdict([2.0, 2.0], others, "val_loss", grace=0) is None


def test_median_rule_follows_the_metrics_direction_and_uses_the_best_so_far():
    others = [[0.9, 0.9, 0.9]] * 3
    assert median_verdict([0.5, 0.6, 0.7], others, "val_accuracy").median == 0.9
    assert median_verdict([0.95, 0.5, 0.5], others, "val_accuracy") is None  # best 0.95
    assert median_verdict([0.5, 0.6, 0.7], others, "val_loss") is None
    assert median_verdict([0.9, 0.9, 0.9], others, "val_loss") is None  # a tie is not worse
    assert median_verdict([math.nan] * 3, others, "val_loss") is None


# -- the estimate -----------------------------------------------------------------------------

def test_the_estimate_counts_epochs_and_times_by_the_last_similar_run():
    trials = plan_trials(grid(("learning_rate", "1e-3,3e-3"), ("batch_per_replica", "32,64"),
                              repeats=2))
    past = [PastRun("demo-old", "demo", "demo", ended=100.0, seconds_per_epoch=9.0),
            PastRun("demo-new", "demo", "demo", ended=200.0, seconds_per_epoch=2.0),
            PastRun("other", "/m/net.keras", "demo", ended=300.0, seconds_per_epoch=50.0)]
    found = estimate(trials, past, at_once=2)
    assert (found.trials, found.epochs, found.per_trial) == (8, 24, 3)
    assert found.seconds == pytest.approx(24.0)  # 8 trials x 3 epochs x 2 s, two at a time
    assert [g.name for g in found.guides] == ["demo-new"]
    assert found.text.startswith("8 trials x 3 epochs = 24 epochs; about 24 s with 2 at a time")
    assert "demo-new" in found.text
    alone = estimate(trials, past[2:], at_once=2)
    assert alone.seconds is None
    assert alone.text.endswith("no earlier run of demo on demo to time it by")
    mixed = estimate(plan_trials(grid(("epochs", "2,4"))), past, at_once=1)
    assert mixed.text.startswith("2 trials, 6 epochs in all; about 12 s")
    # Each trial starts and finishes too (issue 30: 5 s estimated, 28 s taken).
    slow_start = [dataclasses.replace(past[1], overhead_s=11.0)]
    found = estimate(trials, slow_start, at_once=2)
    assert found.seconds == pytest.approx(24.0 + 4 * 11.0)  # 4 trials per slot
    assert "2 s per epoch and 11 s to start and finish as run demo-new" in found.text
    # The time outside the epochs is the mean of the last three runs' (a sweep's first
    # trial also waited for the queue runner to start); the pace is the latest run's.
    runs = [dataclasses.replace(past[1], name=f"r{i}", ended=200.0 + i, overhead_s=o)
            for i, o in enumerate([30.0, 4.0, 8.0, 6.0])]
    (guide,) = estimate(trials, runs, at_once=2).guides
    assert (guide.name, guide.overhead_s, guide.seconds_per_epoch) == ("r3", 6.0, 2.0)


# -- results, scatter and parallel coordinates ------------------------------------------------

def _outcomes(spec: SweepSpec) -> list[TrialOutcome]:
    """val_loss falls with the rate and the batch; trial 1 fails (out of memory), trial 3 is
    stopped early by the rule, the last one still runs."""
    outcomes = []
    trials = plan_trials(spec)
    for trial in trials:
        level = 1.0 / (trial.values["learning_rate"] * 1e3) + len(trial.values["optimizer"])
        curve = tuple(level + 0.1 * trial.repeat + 1.0 / (e + 1) for e in range(3))
        status = {1: TrialStatus.FAILED, 3: TrialStatus.MEDIAN_STOPPED,
                  len(trials) - 1: TrialStatus.RUNNING}.get(trial.index, TrialStatus.COMPLETED)
        run = None if status is TrialStatus.FAILED else ComparedRun(
            trial.label, (0, 1, 2)[:2 if status is TrialStatus.MEDIAN_STOPPED else 3],
            {"val_loss": curve[:2 if status is TrialStatus.MEDIAN_STOPPED else 3]})
        outcomes.append(TrialOutcome(trial, status, run, "out of memory" if run is None else ""))
    return outcomes


SPEC = grid(("learning_rate", "log:1e-3..1e-1:3"), ("optimizer", "sgd,adam"), repeats=2)


def test_the_results_table_ranks_finished_trials_and_groups_repeats():
    outcomes = _outcomes(SPEC)
    results = sweep_results(list(reversed(outcomes)))
    assert [row.trial.index for row in results.rows] == list(range(12))
    assert results.swept == ("learning_rate", "optimizer") and results.direction is Direction.MIN
    counted = [o for o in outcomes if o.status.finished]
    store_best = min(min(o.run.metrics["val_loss"]) for o in counted)
    assert results.best.best.best == store_best
    assert results.best.trial.values == {"learning_rate": 0.1, "optimizer": "sgd"}
    assert results.best.best.best_epoch == 2 and results.best.trial.repeat == 0
    assert [row.is_best for row in results.rows].count(True) == 1
    assert results.rows[1].best is None and results.rows[1].message == "out of memory"
    assert results.rows[3].status.text == MEDIAN_STOPPED and results.rows[3].best.best_epoch == 1
    assert results.rows[11].best is not None and not results.rows[11].status.finished
    # Six settings of two repeats each: mean and sd of their finished bests.
    assert len(results.groups) == 6
    group = results.groups[0]
    assert group.trials == (0, 6) and group.finished == 2
    bests = [results.rows[i].best.best for i in group.trials]
    assert group.mean == pytest.approx(np.mean(bests))
    assert group.high - group.mean == pytest.approx(np.std(bests, ddof=1))
    assert list(group.band.counts) == [2, 2, 2]
    lone = results.groups[1]  # trial 1 failed: its repeat (7) stands alone
    assert (lone.finished, lone.mean, lone.low) == (1, results.rows[7].best.best,
                                                    results.rows[7].best.best)
    assert [g.is_best for g in results.groups] == [False, False, False, False, True, False]


def test_scatter_and_parallel_coordinates_have_one_mark_per_finished_trial():
    results = sweep_results(_outcomes(SPEC))
    finished = [row.trial.index for row in results.finished]
    assert finished == [0, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # not the failed one nor the running
    rate, optimizer = scatter_data(results, SPEC.parameters)
    assert rate.trials == tuple(finished) and optimizer.trials == tuple(finished)
    assert rate.axis.log and (rate.axis.low, rate.axis.high) == (1e-3, 1e-1)
    assert rate.xs[:3] == (1e-3, 1e-2, 1e-2)  # trials 0, 2, 3 at their values
    assert optimizer.axis.categories == ("sgd", "adam") and optimizer.xs[:3] == (0.0, 0.0, 1.0)
    assert rate.ys == tuple(results.rows[i].best.best for i in finished)
    parallel = parallel_data(results, SPEC.parameters)
    assert [a.name for a in parallel.axes] == ["learning_rate", "optimizer", "val_loss"]
    assert [line.trial for line in parallel.lines] == finished
    by_trial = {line.trial: line for line in parallel.lines}
    assert by_trial[0].positions[:2] == (0.0, 0.0)  # 1e-3 at the bottom of a log axis, sgd
    assert by_trial[3].positions[0] == pytest.approx(0.5)  # 1e-2: halfway on a log axis
    assert by_trial[3].positions[1] == 1.0  # adam
    assert all(0.0 <= p <= 1.0 for line in parallel.lines for p in line.positions)
    best = [line for line in parallel.lines if line.is_best]
    assert [line.trial for line in best] == [results.best.trial.index]
    assert best[0].positions[-1] == 0.0  # the lowest loss
