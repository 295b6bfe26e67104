"""JAX's own failures, recognised: what went wrong and in which line of the user's code.

`failures.py` words the message; this module only reads the exception. JAX's
classes are matched by module and name, so neither JAX nor TensorFlow is
imported here (the TensorFlow engine never loads JAX).

Measured with JAX 0.10.2 / Keras 3.15 (2 CPU devices, DataParallel):
- Python code that needs a tensor's value fails while JAX traces it (Keras traces
  a layer's `call` at build time, and `fit` traces the train step before step 1):
  `if tensor:` raises `jax.errors.TracerBoolConversionError`, `float(tensor)`
  `ConcretizationTypeError`, `np.asarray(tensor)` and any `tf.*` op given a JAX
  array `TracerArrayConversionError`, `x[mask]` `NonConcreteBooleanIndexError`,
  `tensor.numpy()` an AttributeError "DynamicJaxprTracer has no attribute numpy".
- Keras re-raises an error from a layer's call as `type(error)(message)`, which
  JAX's tracer errors do not accept: the user gets "AttributeError: 'str' object
  has no attribute '_error_repr'" with the real error only in `__context__`, so
  the whole chain is searched.
- Of those, only the `tf.*` ops run on the tensorflow engine; Keras 3.15 on
  TensorFlow refuses `if tensor:`, `float(tensor)` and `np.asarray(tensor)` too.
- Out of memory: `jax.errors.JaxRuntimeError` "RESOURCE_EXHAUSTED: Out of memory
  allocating N bytes."; XLA's other failures are the same class with another
  status ("INTERNAL: ..."): on CPU an allocation failing inside a compiled matmul
  said "INTERNAL: YNNPACK operation failed: error".
- An exception inside `jax.pure_callback` on one device is a JaxRuntimeError
  "INTERNAL: CpuCallback error calling callback: Traceback ... ValueError: ...".
  On 2 devices the other device waits at the all-reduce and XLA aborts the
  whole process after 40 s (a crash the supervisor reports with the last output).
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

import mgpu_gui

# The most specific of a tracer error's classes first (TracerBoolConversionError is a
# ConcretizationTypeError): what the code did, in words.
_TRACE_ERRORS = {
    "TracerBoolConversionError": "a Python `if`, `while`, `and`, `or` or `not` on a tensor's "
                                 "value",
    "TracerIntegerConversionError": "a tensor used as a Python int (an index, a range, a "
                                    "shape)",
    "TracerArrayConversionError": "a tensor converted to a NumPy array (np.asarray, np.* "
                                  "functions)",
    "NonConcreteBooleanIndexError": "indexing with a boolean mask (x[mask]), whose result's "
                                    "shape depends on the values",
    "UnexpectedTracerError": "a tensor kept from an earlier call (stored on self or in a "
                             "global) and used again",
    "ConcretizationTypeError": "a tensor converted to a Python number (float(), int(), "
                               ".item()) or used where a fixed value is needed",
}
_TRACER_ATTRIBUTE = re.compile(r"\w*Tracer has no attribute '?(?P<name>\w+)")
_CALLBACK = re.compile(r"CpuCallback error[^\n]*?(?P<tb>Traceback \(most recent call last\):"
                       r"\n.*)", re.DOTALL)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)')
_STATUS = re.compile(r"^(?P<status>[A-Z][A-Z_]+): ")
_LIBRARIES = tuple(str(Path(p)) for p in {sysconfig.get_paths()["stdlib"],
                                          sysconfig.get_paths()["purelib"],
                                          sysconfig.get_paths()["platlib"],
                                          str(Path(mgpu_gui.__file__).parent)})


class JaxFailureKind(Enum):
    TRACE = "trace"  # the model's Python code cannot run under jit
    TENSORFLOW_OP = "tensorflow_op"  # a tf.* op given a JAX array: runs on TensorFlow only
    OUT_OF_MEMORY = "out_of_memory"
    CALLBACK = "callback"  # the model's code raised inside jax.pure_callback
    RUNTIME = "runtime"  # XLA's compiler or runtime failed


@dataclass(frozen=True)
class CodeLine:
    """The line of the user's code where it happened."""

    file: str
    line: int
    function: str
    code: str = ""

    def __str__(self) -> str:
        where = f"{Path(self.file).name}, line {self.line}, in {self.function}"
        return f"{where}: `{self.code}`" if self.code else where


@dataclass(frozen=True)
class JaxFailure:
    """A failure of JAX's, read from its exception."""

    kind: JaxFailureKind
    what: str  # in words: what the code did, or the error's first line
    origin: CodeLine | None = None
    status: str = ""  # XLA's status of a runtime error, e.g. "INTERNAL"
    # The exception JAX raised: Keras' re-raise can hide it from a printed traceback.
    source: BaseException | None = field(default=None, compare=False)


def jax_failure(error: BaseException) -> JaxFailure | None:
    """What JAX said went wrong in `error` or the exceptions it came from; None when
    none of them is JAX's."""
    chain = _chain(error)
    for cause in reversed(chain):  # the innermost says most
        failure = _read(cause, chain)
        if failure is not None:
            return replace(failure, source=cause)
    return None


def _read(error: BaseException, chain: list[BaseException]) -> JaxFailure | None:
    names = [cls.__name__ for cls in type(error).__mro__]
    is_jax = type(error).__module__.split(".")[0] in ("jax", "jaxlib")
    if is_jax and "JaxRuntimeError" in names:
        return _runtime(str(error))
    trace = next((_TRACE_ERRORS[n] for n in names if n in _TRACE_ERRORS), None) if is_jax else (
        None)
    attribute = _TRACER_ATTRIBUTE.search(str(error)) if isinstance(error, AttributeError) else (
        None)
    if attribute is not None:
        trace = f"`.{attribute.group('name')}` asked of a tensor being traced"
    if trace is None:
        return None
    origin = _user_line(chain)
    if _through_tensorflow(error):
        return JaxFailure(JaxFailureKind.TENSORFLOW_OP, "a TensorFlow operation given the "
                          "model's tensors", origin)
    return JaxFailure(JaxFailureKind.TRACE, trace, origin)


def _runtime(text: str) -> JaxFailure:
    status = _STATUS.match(text)
    said = text.strip().splitlines()[0] if text.strip() else text
    callback = _CALLBACK.search(text)
    if callback is not None:
        lines = callback.group("tb").rstrip().splitlines()
        frames = [CodeLine(f, int(n), func.strip()) for f, n, func in
                  _FRAME.findall(callback.group("tb"))]
        users = [frame for frame in frames if _is_users(frame.file)]
        return JaxFailure(JaxFailureKind.CALLBACK, lines[-1].strip(),
                          users[-1] if users else None, "INTERNAL")
    kind = JaxFailureKind.OUT_OF_MEMORY if (
        status and status.group("status") == "RESOURCE_EXHAUSTED") else JaxFailureKind.RUNTIME
    return JaxFailure(kind, said, None, status.group("status") if status else "")


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and all(seen is not e for e in chain):
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _user_line(chain: list[BaseException]) -> CodeLine | None:
    """The innermost line of the user's own code (not a library's, not the app's) in the
    tracebacks of `chain`, innermost exception first."""
    for error in reversed(chain):
        frames = [(frame, line) for frame, line in traceback.walk_tb(error.__traceback__)
                  if _is_users(frame.f_code.co_filename)]
        if frames:
            frame, line = frames[-1]
            code = frame.f_code
            source = traceback.FrameSummary(code.co_filename, line, code.co_name).line or ""
            return CodeLine(code.co_filename, line, code.co_qualname, source.strip())
    return None


def _through_tensorflow(error: BaseException) -> bool:
    return any("tensorflow" in Path(frame.f_code.co_filename).parts
               for frame, _ in traceback.walk_tb(error.__traceback__))


def _is_users(file: str) -> bool:
    path = str(Path(file))
    return not file.startswith("<") and not path.startswith(_LIBRARIES)
