r"""A user's own model for ``pyg-dynscale train --model``.

``--model`` names a model of the zoo (``tgcn``, ``gconvgru``, ...:
:mod:`pyg_dynscale.nn.zoo`) or the user's own, in one of two forms:

* ``PATH.py:Name`` -- a Python file, imported by path
  (:func:`importlib.util.spec_from_file_location`) under the stable module
  name ``pyg_dynscale_user_<stem>`` (every torchrun worker imports it the
  same way); a relative ``PATH`` is resolved against the current directory,
  and the file's folder is put first on ``sys.path`` (as ``python PATH.py``
  does), so it may import its neighbours;
* ``package.module:Name`` -- a module importable from ``sys.path``
  (``PYTHONPATH``; the current directory is added, as ``python -m`` does).

``Name`` (a dotted qualified name is followed attribute by attribute) is a
:class:`torch.nn.Module` subclass or a function that returns a module, and
is called with the keyword arguments of ``--model-args`` (a JSON object). Of
the constructor's parameters, the input-size ones
(:data:`INPUT_SIZE_KEYWORDS`) that ``--model-args`` does not give are filled
with the data's node features :math:`F`.

:func:`build_user_model` builds the model the way a script using the Python
API would: ``torch.manual_seed(seed)`` right before the constructor, the
head (if any) right after it, both then cast to the parameter dtype. The
head follows the zoo's rule (:func:`default_head`): for node targets, a
model whose output rows do not have the target's width gets ``ReLU`` +
``Linear(out, target width)``; a model whose output already has the target's
width (PyGT's ``RecurrentGCN`` with its ``Linear(32, 1)``) none; link
targets never get one (the logit of a pair is the dot product of its
endpoints' outputs, or the model's ``link_logits``).

Every problem with the spec, the file, the import or the arguments raises
:class:`~pyg_dynscale.errors.CommandError` with one line naming the option
(``--model`` or ``--model-args``) and the fix.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from ..errors import CommandError
# defined torch-free there: the command line's parser reads it without importing torch
from ..names import INPUT_SIZE_KEYWORDS
from .job import fail

__all__ = ["INPUT_SIZE_KEYWORDS", "MODULE_PREFIX", "UserModel", "is_model_spec", "parse_model_args",
           "load_user_model", "build_user_model", "output_width", "default_head", "describe_head", "runtime_path",
           "needs_sorted_edges"]

#: Prefix of the module name a ``PATH.py`` file is imported under (followed by its stem).
MODULE_PREFIX = "pyg_dynscale_user_"
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def is_model_spec(text: str) -> bool:
    """Whether ``--model`` ``text`` names a user's model (``SOURCE:Name``)
    rather than a zoo name."""
    return ":" in text


@dataclass
class UserModel:
    r"""A user's model, imported and checked (no instance yet).

    Attributes:
        spec (str): ``--model`` as given.
        source (str): the absolute path of the file, or the module name.
        attr (str): the qualified name looked up in it.
        is_file (bool): ``PATH.py:Name`` (else ``module:Name``).
        args (dict): ``--model-args``.
        factory (Callable): the class or function ``attr`` names.
        filled (tuple): the input-size parameters the data fills
            (:data:`INPUT_SIZE_KEYWORDS` the constructor takes and ``args``
            lacks).
    """

    spec: str
    source: str
    attr: str
    is_file: bool
    args: dict
    factory: Callable[..., Any]
    filled: tuple = field(default_factory=tuple)

    @property
    def target(self) -> str:
        """The resolved ``module:qualname`` of :attr:`factory` (where it is
        defined: a class a file imports from a package is that package's)."""
        f = self.factory
        return f"{getattr(f, '__module__', None) or self.source}:{getattr(f, '__qualname__', self.attr)}"

    @property
    def name(self) -> str:
        return str(getattr(self.factory, "__name__", self.attr))

    def kwargs(self, num_node_features: int) -> dict:
        """The keyword arguments of the constructor for data with
        ``num_node_features`` node features: ``args`` and the filled input sizes."""
        return {**self.args, **{k: int(num_node_features) for k in self.filled}}

    def call_text(self, kwargs: dict) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


# ------------------------------------------------------------------ --model-args
def parse_model_args(text: Optional[str]) -> dict:
    """``--model-args`` as a dict (``{}`` when not given).

    Raises:
        CommandError: not valid JSON, or not a JSON object with string keys.
    """
    if text is None:
        return {}
    example = "e.g. --model-args '{\"hidden\": 16}'"
    try:
        value = json.loads(text)
    except ValueError as exc:
        fail(f"--model-args {text!r} is not valid JSON ({exc}); give a JSON object of keyword arguments, {example} "
              "(quote it for the shell).")
    if not isinstance(value, dict):
        fail(f"--model-args {text!r} is a JSON {type(value).__name__}, not an object; give the constructor's keyword "
              f"arguments as a JSON object, {example}.")
    bad = [k for k in value if not k.isidentifier()]
    if bad:
        fail(f"--model-args: {bad[0]!r} is not a keyword argument name; give a JSON object keyed by the "
              f"constructor's parameter names, {example}.")
    return value


# ------------------------------------------------------------------ import
@contextlib.contextmanager
def _user_code(spec: str) -> Any:
    """Around the user's code: what it prints goes to stderr (stdout carries
    the ``--json`` report)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _import_file(spec: str, path: str) -> Any:
    full = os.path.abspath(path)
    if os.path.isdir(full):
        fail(f"--model {spec}: '{path}' is a directory; give a Python file, PATH.py:ClassName.")
    if not os.path.isfile(full):
        fail(f"--model {spec}: no such file '{path}' (resolved against the current directory '{os.getcwd()}'); "
              "give the path of the Python file that defines the model, PATH.py:ClassName.")
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(full))[0])
    name = MODULE_PREFIX + stem
    loader_spec = importlib.util.spec_from_file_location(name, full)
    if loader_spec is None or loader_spec.loader is None:
        fail(f"--model {spec}: '{path}' cannot be imported as a Python file; give a .py file.")
    module = importlib.util.module_from_spec(loader_spec)
    folder = os.path.dirname(full)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    previous = sys.modules.get(name)
    sys.modules[name] = module  # before it runs: dataclasses, pickling and its own imports look it up
    try:
        with _user_code(spec):
            loader_spec.loader.exec_module(module)
    except BaseException as exc:
        if previous is not None:
            sys.modules[name] = previous
        else:
            sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        fail(f"--model {spec}: importing '{path}' failed: {_one_line(exc)}; fix the file (or install what it "
              "imports).")
    return module


def _import_module(spec: str, name: str) -> Any:
    if not _IDENTIFIER.match(name):
        fail(f"--model {spec}: '{name}' is neither a Python file (PATH.py) nor a module name (package.module); "
              "give PATH.py:ClassName or package.module:ClassName.")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # as `python -m` does (the console script does not)
        sys.path.append(cwd)
    try:
        with _user_code(spec):
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            fail(f"--model {spec}: no module named '{exc.name}' on the Python path; put its folder on PYTHONPATH "
                  f"(or run from it), or give the file: PATH.py:{spec.rpartition(':')[2]}.")
        fail(f"--model {spec}: importing module '{name}' failed: {_one_line(exc)}; install what it imports.")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        fail(f"--model {spec}: importing module '{name}' failed: {_one_line(exc)}; fix the module.")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _candidates(module: Any) -> list:
    """Names of the module's classes of modules and functions (for a
    misspelt name)."""
    out = []
    for key, value in vars(module).items():
        if key.startswith("_"):
            continue
        if inspect.isclass(value) and issubclass(value, torch.nn.Module):
            out.append(key)
        elif inspect.isfunction(value) and getattr(value, "__module__", None) == module.__name__:
            out.append(key)
    return out


def load_user_model(spec: str, model_args: Optional[str] = None) -> UserModel:
    r"""Import the model ``spec`` names and check it against ``model_args``
    without building it (no data needed: run before any work).

    Args:
        spec: ``PATH.py:Name`` or ``package.module:Name``.
        model_args: ``--model-args``, a JSON object (``None``: no arguments).

    Returns:
        The :class:`UserModel`, with the input-size parameters the data will
        fill.

    Raises:
        CommandError: one line naming ``--model`` or ``--model-args``: a
            malformed spec, a missing file, a failing import, a missing name,
            something that is not a module class or factory, an unknown
            keyword, a required parameter no one gives.
    """
    args = parse_model_args(model_args)
    source, _, attr = spec.rpartition(":")
    if not source or not attr:
        fail(f"--model {spec!r}: write PATH.py:ClassName or package.module:ClassName (a class or function name after "
              "the colon).")
    if not _IDENTIFIER.match(attr):
        fail(f"--model {spec}: '{attr}' is not a Python name; give the class (or function) name after the colon, "
              "e.g. model.py:RecurrentGCN.")
    is_file = source.endswith(".py") or os.sep in source or "/" in source
    module = _import_file(spec, source) if is_file else _import_module(spec, source)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            where = f"'{source}'" if is_file else f"module '{source}'"
            names = _candidates(module)
            fail(f"--model {spec}: {where} defines no '{attr}'"
                  + (f" (its modules and functions: {', '.join(names[:10])})" if names else
                     " (and no torch.nn.Module class)") + "; give one of its names after the colon.")
        obj = getattr(obj, part)
    if isinstance(obj, torch.nn.Module):
        fail(f"--model {spec}: '{attr}' is a torch.nn.Module instance; name its class (or a function that builds "
              "it): the command builds the model itself, seeded with --seed, on every rank.")
    if inspect.isclass(obj) and not issubclass(obj, torch.nn.Module):
        fail(f"--model {spec}: {attr} is a class but not a torch.nn.Module; give a torch.nn.Module subclass, or a "
              "function that returns one.")
    if not callable(obj):
        fail(f"--model {spec}: {attr} is a {type(obj).__name__}, not a torch.nn.Module class or a function that "
              "returns one.")
    user = UserModel(spec, os.path.abspath(source) if is_file else source, attr, is_file, args, obj)
    user.filled = _check_signature(user)
    return user


def _check_signature(user: UserModel) -> tuple:
    """The input-size parameters to fill; refuses unknown keywords and
    required parameters that neither ``--model-args`` nor the data give."""
    try:
        params = inspect.signature(user.factory).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the call itself will tell
        return ()
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    by_name = {n: p for n, p in params.items() if p.kind in _BY_NAME}
    filled = tuple(n for n in INPUT_SIZE_KEYWORDS if n in by_name and n not in user.args)
    unknown = [k for k in user.args if k not in by_name and not takes_any]
    if unknown:
        fail(f"--model-args: {user.name}() takes no keyword argument {unknown[0]!r} (its parameters: "
              f"{', '.join(by_name) or 'none'}); fix the name in --model-args, or drop it.")
    missing = [n for n, p in params.items() if p.default is p.empty and
               ((p.kind in _BY_NAME and n not in user.args and n not in filled) or p.kind == p.POSITIONAL_ONLY)]
    if missing:
        fail(f"--model {user.spec}: {user.name}() needs {missing[0]!r}, which --model-args does not give (the data "
              f"fills only the input sizes: {', '.join(INPUT_SIZE_KEYWORDS)}); add it, e.g. --model-args "
              f"'{_with_placeholder(user.args, missing[0])}'.")
    return filled


def _with_placeholder(args: dict, name: str) -> str:
    """``args`` as JSON with ``name: VALUE`` added (an example for a message)."""
    given = json.dumps(args)[1:-1]
    return "{" + (given + ", " if given else "") + f'"{name}": VALUE' + "}"


# ------------------------------------------------------------------ build
def output_width(model: torch.nn.Module, signal: Any) -> int:
    r"""Elements of one output row of ``model`` (before any head), from a
    forward of a copy in eval mode on the first two snapshots of ``signal``
    (on the path the trainers take; the global random state is left as it
    was)."""
    from ..runtime import FusedTrainer

    head_of = signal.select(torch.arange(min(2, signal.num_snapshots)))
    twin = copy.deepcopy(model).eval()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        out = FusedTrainer(twin, head_of, loss="mse").outputs()
    return int(out.reshape(out.shape[0], -1).shape[1]) if out.dim() > 1 else 1


def default_head(width: int, target_width: int) -> Optional[torch.nn.Module]:
    """The zoo's head, :math:`\\mathrm{Linear}(\\mathrm{ReLU}(y))`, when the
    model's output ``width`` differs from the target's (else ``None``)."""
    if width == target_width:
        return None
    return torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(width, target_width))


def describe_head(head: Optional[torch.nn.Module]) -> Optional[str]:
    """``"ReLU + Linear(32, 1)"`` for the head's layers (``None``: no head)."""
    if head is None:
        return None
    parts = []
    for m in (head if isinstance(head, torch.nn.Sequential) else [head]):
        parts.append(f"Linear({m.in_features}, {m.out_features})" if isinstance(m, torch.nn.Linear)
                     else type(m).__name__)
    return " + ".join(parts)


def build_user_model(user: UserModel, signal: Any, *, seed: int, dtype: torch.dtype,
                     target: str = "node") -> tuple:
    r"""Build the user's model for ``signal`` as a Python script would:
    ``torch.manual_seed(seed)``, the constructor, the head (:func:`default_head`,
    node targets only), both cast to ``dtype``.

    Args:
        user: from :func:`load_user_model`.
        signal: the data (its node features fill the input sizes; its first
            snapshots give the output width).
        seed: ``--seed``.
        dtype: the parameter dtype.
        target: ``"node"`` or ``"link"``.

    Returns:
        ``(model, head, kwargs)``: the module, the head or ``None``, and the
        keyword arguments the constructor got.

    Raises:
        CommandError: the constructor raised, or returned no module.
    """
    kwargs = user.kwargs(signal.num_node_features)
    torch.manual_seed(seed)
    try:
        with _user_code(user.spec):
            model = user.factory(**kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        fail(f"--model {user.spec}: {user.call_text(kwargs)} raised {_one_line(exc)}; check --model-args.")
    if not isinstance(model, torch.nn.Module):
        fail(f"--model {user.spec}: {user.call_text(kwargs)} returned a {type(model).__name__}, not a "
              "torch.nn.Module; return the model from the function.")
    head = None
    if target == "node":
        state = torch.get_rng_state()  # the head's parameters follow the model's in the seeded stream
        try:
            width = output_width(model, signal)
        except CommandError:
            raise
        except Exception as exc:
            fail(f"--model {user.spec}: {user.call_text(kwargs)} failed on the first snapshots: {_one_line(exc)}; it "
                  "is called as model(x, edge_index, edge_weight[, h]) with the data's features.")
        torch.set_rng_state(state)
        y = signal.y
        head = default_head(width, 1 if y.dim() == 1 else int(y[0].numel()))
    model = model.to(dtype=dtype)
    return model, (head.to(dtype=dtype) if head is not None else None), kwargs


def runtime_path(model: torch.nn.Module) -> tuple:
    r"""``(path, resolved)``: the path the trainers take for ``model``
    (``"decomposed"`` or ``"blackbox"``, as ``path="auto"`` decides, with
    the decomposition's self-check) and the module they run."""
    from ..nn.snapshot_model import SnapshotModel
    from ..runtime.paths import resolve_model

    with torch.random.fork_rng(devices=[]):
        resolved = resolve_model(model, "auto", check=True)
    return ("blackbox" if isinstance(resolved, SnapshotModel) else "decomposed"), resolved


def needs_sorted_edges(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds PyGT's diffusion convolution (``DCRNN``'s
    ``DConv``), which splits across ranks only on edges sorted by (target,
    source) (docs/blackbox.md)."""
    return any(type(m).__name__ == "DConv" and type(m).__module__.startswith("torch_geometric_temporal")
               for m in model.modules())
