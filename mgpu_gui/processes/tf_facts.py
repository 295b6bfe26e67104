"""Child entry: say what TensorFlow and JAX see on this machine, as one `TfFactsGathered`
event.

    python -m mgpu_gui.processes.tf_facts --events-fd N  < {}

Started by `mgpu_gui.core.tools.tf_facts` (the About dialog, "Check my
setup…", `mgpu-train doctor`); the facts are gathered by
`mgpu_gui.engine.tf_facts.gather` and written as a JSON line to the inherited
pipe `N`, so nothing TensorFlow or Keras print can corrupt them. TensorFlow's
own log lines about CUDA, GPUs and NCCL are added to them as `messages` (they
explain a missing GPU). JAX is asked after TensorFlow (`gather_jax`, its facts
under "jax"), with its GPU memory preallocation off before it starts: asking
must not take 75 % of every GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import logging
import logging.handlers
import os
import re
import sys
import tempfile
from typing import Any

from mgpu_gui.core.engines import NO_PREALLOCATION, Engine, installed
from mgpu_gui.core.events import TfFactsGathered
from mgpu_gui.engine.tf_facts import gather

# TensorFlow log lines worth showing a user who asks why a GPU is not used.
_RELEVANT = re.compile(r"dlopen|cuInit|cuda|CUDA|GPU|gpu|NCCL|nccl|driver|Ignoring visible")
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")  # "W0000 00:00:… x.cc:52] "
MAX_MESSAGES = 12


def relevant_messages(lines: list[str]) -> list[str]:
    """TensorFlow's log lines about CUDA, GPUs and NCCL, once each, without the glog prefix."""
    seen: dict[str, None] = {}
    for line in lines:
        if _RELEVANT.search(line):
            seen.setdefault(_GLOG_PREFIX.sub("", line.strip()), None)
    return list(seen)[-MAX_MESSAGES:]


def gather_jax() -> dict[str, Any]:
    """What JAX says (a `doctor_jax.JaxFacts` as a dict); never raises. Call it with
    NO_PREALLOCATION in the environment."""
    if importlib.util.find_spec("jax") is None:
        return {"installed": False}
    facts: dict[str, Any] = {"installed": True, "cuda_plugins": {
        d.metadata["Name"]: d.version for d in importlib.metadata.distributions()
        if re.fullmatch(r"jax-cuda\d+-(plugin|pjrt)", (d.metadata["Name"] or "").lower())}}
    # JAX logs here why it skips a backend (e.g. a CUDA plugin that cannot start).
    logger = logging.getLogger("jax._src.xla_bridge")
    said = logging.handlers.BufferingHandler(capacity=1000)
    logger.addHandler(said)
    try:
        import jax
        import jaxlib

        facts.update(jax_version=jax.__version__, jaxlib_version=jaxlib.__version__)
        devices = jax.devices()
        facts["backend"] = jax.default_backend()
        facts["devices"] = [{"id": d.id, "platform": d.platform, "kind": d.device_kind}
                            for d in devices]
    except Exception as exc:  # a broken install, a plugin that fails: a finding, no crash
        facts["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        logger.removeHandler(said)
    facts["messages"] = [record.getMessage() for record in said.buffer][-MAX_MESSAGES:]
    return facts


def _version(distribution: str) -> str | None:
    """An installed distribution's version, read from its metadata (nothing imported)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def _captured_stderr():
    """Collect what TensorFlow's C++ side logs on fd 2 (it explains missing GPUs)."""
    lines: list[str] = []
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            lines.extend(text.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.tf_facts")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    # Warnings and errors only: TensorFlow says why it skips a GPU at WARNING level.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # as runs number GPUs
    os.environ.update(NO_PREALLOCATION)  # read once, when JAX's backend starts
    with _captured_stderr() as logged:
        try:
            facts = gather()
        except Exception as exc:  # a bug here: still answer
            facts = {"error": f"checking TensorFlow failed: {type(exc).__name__}: {exc}"}
    facts["messages"] = relevant_messages(logged)
    if not installed(Engine.TENSORFLOW):  # a JAX-only machine: absent, not broken
        facts.update(installed=False, keras_version=_version("keras"))
    for line in logged:  # still visible to whoever runs this by hand
        print(line, file=sys.stderr)
    facts["jax"] = gather_jax()  # not captured: what JAX prints is not TensorFlow's to explain
    with os.fdopen(args.events_fd, "w", encoding="utf-8") as pipe:
        pipe.write(TfFactsGathered(facts).to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
