"""Tests' stand-in for authentication: a request's ``X-Test-Actor: key_id/name`` header becomes the
actor authentication would name (``molens.actor`` in the request environ), so tests can make
changes as several actors before the API has keys of its own.

:func:`with_actor_header` adds it to an app; run as a script, this module starts a node (the
``molens-node`` command line) whose app has it.
"""

from __future__ import annotations

import sys

import bottle

from molens.web.audit import ACTOR_ENVIRON

HEADER = "X-Test-Actor"


def with_actor_header(app: bottle.Bottle) -> bottle.Bottle:
    def name_the_actor() -> None:
        raw = bottle.request.get_header(HEADER)
        if raw:
            key_id, _, name = raw.partition("/")
            bottle.request.environ[ACTOR_ENVIRON] = (key_id, name)

    app.add_hook("before_request", name_the_actor)
    return app


def main() -> int:
    import molens.web.app as web_app
    from molens.cli import main as node_main

    make_app = web_app.make_app
    web_app.make_app = lambda *a, **kw: with_actor_header(make_app(*a, **kw))  # type: ignore[assignment]
    return node_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
