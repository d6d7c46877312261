"""One exception tree: every exception class defined in ``molens/`` derives from
:class:`molens.errors.MolensError` (drawn in that module's docstring), so ``except MolensError``
catches every error Molens raises on purpose. Left out, each for its reason: the client SDK
(``molens/client.py``: its own ``ClientError`` tree, under MolensError already), and the classes in
:data:`OUTSIDE_THE_TREE`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import molens
from molens.errors import MolensError

OUTSIDE_THE_TREE = {
    "molens.raft.errors": "the Raft package imports nothing else from molens (its import contract) and keeps "
    "its own tree, RaftError, drawn in molens/raft/errors.py; the node maps it to API errors",
    "molens.delivery.CallbackHostDenied": "raised inside urllib3's connect, so it must be urllib3's "
    "NewConnectionError (urllib3 handles only its own errors there); it carries a CallbackDenied's message",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in molens (but the client SDK), by ``module.name``."""
    found: dict[str, type[BaseException]] = {}
    for mod in pkgutil.walk_packages(molens.__path__, "molens."):
        if mod.name == "molens.client" or mod.name.endswith(".__main__"):
            continue
        module = importlib.import_module(mod.name)
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == mod.name:
                found[f"{mod.name}.{name}"] = cls
    return found


def _left_out(qualname: str) -> bool:
    return qualname in OUTSIDE_THE_TREE or qualname.rsplit(".", 1)[0] in OUTSIDE_THE_TREE


def test_every_exception_class_in_molens_derives_from_molens_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 40  # the walk finds the package's errors (not an empty list that passes)
    outside = sorted(q for q, cls in classes.items() if not issubclass(cls, MolensError) and not _left_out(q))
    assert outside == []


def test_what_is_left_out_of_the_tree_exists_and_is_outside_it() -> None:
    classes = _exception_classes()
    for where in OUTSIDE_THE_TREE:
        named = [cls for q, cls in classes.items() if q == where or q.rsplit(".", 1)[0] == where]
        assert named, f"{where} names no exception class"
        assert not any(issubclass(cls, MolensError) for cls in named), f"{where} is in the tree now"
