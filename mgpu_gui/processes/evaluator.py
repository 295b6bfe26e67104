"""Child-process entry that evaluates a trained model, or predicts image files.

    python -m mgpu_gui.processes.evaluator --events-fd N  < request.json

The request is an `EvaluateRequest` or a `PredictRequest` (core/tools/
evaluate_job.py) on stdin. Events go as JSON lines to the inherited pipe `N`
(stdout and stderr belong to Keras and TensorFlow): `EvaluationProgress` while
it predicts, then `EvaluationDone` (or `PredictionsMade`), or `EvaluationFailed`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mgpu_gui.core.events import EvaluationDone, EvaluationFailed, Event, LogMessage
from mgpu_gui.core.tools.evaluate_job import PredictRequest, request_from_dict
from mgpu_gui.processes.failure import failure_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.evaluator")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    request = request_from_dict(json.loads(sys.stdin.read()))
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as pipe:
        def emit(event: Event) -> None:
            pipe.write(event.to_json() + "\n")

        try:
            from mgpu_gui.engine.strategy import apply_device_env, make_strategy

            apply_device_env(request.plan)  # before TensorFlow is imported
            if isinstance(request, PredictRequest):
                from mgpu_gui.engine.prediction import predict_files

                emit(predict_files(request))
                return 0
            strategy, _ = make_strategy(request.plan)
            from mgpu_gui.engine.evaluation import evaluate

            result, path = evaluate(request, strategy, emit,
                                    lambda message: emit(LogMessage(message)))
        except Exception as error:
            emit(failure_of(error, EvaluationFailed))
            return 1
        emit(EvaluationDone(result.to_dict(), None if path is None else str(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
