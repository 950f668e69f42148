"""schemathesis against the portal (issue 54's acceptance): every operation of its OpenAPI schema
fuzzed with each role's credentials (owner A's token, the admin's, and none), 0 server errors.

Over the tiny adi portal of tests/_portal_support.py (the DP release on, a --compare audit, k =
2), built once for the module; a few examples per operation and role (the cost of the suite
matters: issue 53). The documented status codes and bodies are test_serve_schema's subject (the
app without the portal, whose refusals 401/403 the schema does not list); here the subject is
that no role's request, however odd, breaks the server."""

from __future__ import annotations

from urllib.parse import urlsplit

import _portal_support as support
import pytest
import schemathesis
import schemathesis.specs.openapi.schemas  # noqa: F401 - imported at collection (see test_serve_schema)
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

ROLES = ("alice", "root", "anonymous")
EXAMPLES = 6


@pytest.fixture(scope="module")
def portal(tmp_path_factory):
    from fastapi.testclient import TestClient

    from limelight.service.dprelease import release_log

    info = support.build(tmp_path_factory.mktemp("portal-schema"))
    dp = release_log(info["log"], 1.0, 1e-6, 2)
    app, service, accounts, tokens = support.portal(info, tmp_path_factory.mktemp("db") / "p.db", dp=dp)
    with TestClient(app):  # started once: the lifespan
        yield schemathesis.openapi.from_asgi("/openapi.json", app), tokens
    accounts.close()


def _labels() -> list[str]:
    import test_serve_schema

    return [*test_serve_schema.OPERATIONS, "GET /api/me"]


def test_the_portal_schema_holds_every_operation(portal):
    schema, _ = portal
    assert sorted(op.label for op in (r.ok() for r in schema.get_all_operations())) == sorted(_labels())


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("label", _labels())
def test_no_role_gets_a_server_error(portal, label, role):
    schema, tokens = portal
    op = next(op for op in (r.ok() for r in schema.get_all_operations()) if op.label == label)
    statuses = []
    prefix = op.path.split("{", 1)[0]  # the operation's fixed part: /api/queries/ of /api/queries/{qid}

    @given(case=op.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case):
        response = case.call_and_validate(headers=tokens[role], checks=[not_a_server_error])
        # a path parameter of dot segments ("../x") is resolved by the client to another path
        # (/api/x: "no page at /api/x"; /api: a page): that path's answer, not this operation's
        elsewhere = not urlsplit(str(response.request.url)).path.startswith(prefix)
        statuses.append((response.status_code, elsewhere))

    run()
    assert statuses and max(code for code, _ in statuses) < 500
    if role == "anonymous" and label not in ("GET /api/info", "GET /api/search", "GET /api/me"):
        # refused before the route (the requests the client sent elsewhere aside)
        refused = {code for code, elsewhere in statuses if not elsewhere}
        assert refused <= {401, 413, 422}, (label, sorted(set(statuses)))
