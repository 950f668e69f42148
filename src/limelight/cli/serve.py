"""``limelight serve --audit DIR``: the web app and JSON API over an audit directory; with
``--db`` the portal for content owners (accounts, the policy, the searchers' privacy)."""

from __future__ import annotations

import errno
from pathlib import Path

import typer


def serve(
    audit: Path = typer.Option(..., "--audit", help="an audit directory (limelight audit --out DIR)"),
    host: str = typer.Option("127.0.0.1", help="interface to listen on"),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: any free port)"),
    reranker: Path | None = typer.Option(None, "--reranker",
                                         help="a re-ranker checkpoint (limelight rerank) for the search page"),
    workers: int | None = typer.Option(None, "--workers", min=1,
                                       help="server processes sharing the port, forked once the audit is "
                                            "loaded (its stores and models shared; sessions, the login "
                                            "throttle and the access log in the --db database); default: "
                                            "1 with --auth none, else one per core (at most 4)"),
    threads: int = typer.Option(1, "--threads", min=1, help="threads of the BM25 kernel in each worker"),
    max_body: int = typer.Option(1 << 20, min=1024, help="largest accepted request body in bytes"),
    preload: bool = typer.Option(True, help="load the search models and retrievability before serving"),
    preload_eqi: bool = typer.Option(False, help="build the exact reverse search engines before serving "
                                                 "(else on the first EQI search of each system; ~650 MB on "
                                                 "the Debian demo audit)"),
    eqi_queue: int = typer.Option(4, min=0, help="EQI searches that may wait behind the running one "
                                                 "(one more: 429 with Retry-After)"),
    eqi_timeout: float = typer.Option(30.0, min=0.1, help="seconds an EQI search may wait for its turn "
                                                          "(longer: 503 with Retry-After)"),
    eqi_threads: int = typer.Option(1, min=1, help="FAISS and numba threads of an EQI search (the other "
                                                    "cores keep answering the rest of the API)"),
    view_cache_mb: int = typer.Option(256, min=1, help="MiB of derived retrievability views kept "
                                                       "(least recently used dropped first)"),
    db: str | None = typer.Option(None, "--db", envvar="LIMELIGHT_DB",
                                  help="the portal's accounts database (limelight users): sqlite:///FILE "
                                       "or postgresql://USER@HOST/DB; turns on --auth password"),
    owners: str | None = typer.Option(None, "--owners", help="who owns which documents: field:NAME (a "
                                      "document field, e.g. Debian's source) or a TSV of OWNER<TAB>ID-or-pattern"),
    min_searches: int = typer.Option(2, "--min-searches", min=1, help="k: a query reaches an owner only when "
                                     "issued at least k times (searchers' privacy)"),
    auth: str | None = typer.Option(None, "--auth", help="password (login page and API tokens), proxy (a user "
                                    "header from --trusted-proxy addresses, and API tokens) or none (every "
                                    "visitor sees everything: loopback only); default: password with --db, "
                                    "else none"),
    proxy_header: str = typer.Option("X-Remote-User", help="--auth proxy: the header naming the user"),
    trusted_proxy: list[str] = typer.Option(["127.0.0.1", "::1"], "--trusted-proxy",
                                            help="--auth proxy: an address (or network) of the proxy; repeat"),
    anonymous_search: bool = typer.Option(True, help="search without logging in (the engine's public output)"),
    session_hours: float = typer.Option(8.0, min=0.01, help="hours a login session lasts"),
    https_only: bool = typer.Option(False, help="session cookies marked Secure (serve behind HTTPS)"),
    compare: Path | None = typer.Option(None, "--compare", help="a second audit (engine version B, or another "
                                        "period of the log) that /compare and /api/compare set against --audit"),
    dp_epsilon: float | None = typer.Option(None, "--dp-epsilon", min=1e-6, help="an owner's searches from a "
                                            "differentially private release of the log (OpenDP; Korolova et al. "
                                            "2009) with this epsilon per searcher, stated on the pages"),
    dp_delta: float = typer.Option(1e-6, "--dp-delta", min=1e-15, max=0.5, help="the release's delta per searcher"),
    dp_cap: int = typer.Option(4, "--dp-cap", min=1, help="the release counts each searcher's first N distinct searches"),
    dp_log: str | None = typer.Option(None, "--dp-log", help="the searcher log the release counts (a searcher or "
                                      "session column; default: the audit's query log)"),
) -> None:
    """Serve search, exposing queries, retrievability and EQI over an audit (read-only); with
    --db, as the portal where each content owner sees its own documents. Long because the
    portal's options (database, owners, k, auth) are checked together before anything starts."""
    import uvicorn

    from limelight.audit import AuditDir
    from limelight.errors import plural
    from limelight.service.app import create_app
    from limelight.service.core import AuditService, open_service
    from limelight.service.prefork import default_workers, fork_safe_threads, serve_workers

    AuditDir(audit).manifest  # noqa: B018 - a one-line error for a directory that is no audit
    auth = check_auth(auth, db, owners, host)
    dp = dp_release_of(audit, auth, dp_log, dp_epsilon, dp_delta, dp_cap)  # drawn once, before serving
    n_workers = workers or default_workers(auth)
    if n_workers > 1:
        fork_safe_threads()  # one OpenMP/BLAS thread per worker process
    accounts = None
    if auth != "none":
        from limelight.service.accounts import Accounts

        accounts = Accounts(db)  # a database that cannot be opened fails before the audit loads
    sock = bind_socket(host, port)  # before loading anything: a busy port fails at once
    try:
        service: AuditService = open_service(audit, reranker, eqi_queue=eqi_queue, eqi_timeout=eqi_timeout,
                                             eqi_threads=eqi_threads, view_cache_bytes=view_cache_mb << 20)
        service.threads = threads
        if preload and n_workers == 1:  # workers warm up after the fork (prefork: thread pools)
            service.warm(eqi=preload_eqi)
        compared = open_service(compare, view_cache_bytes=view_cache_mb << 20) if compare else None
        application = create_app(service, max_body=max_body, compare=compared)
        if accounts is not None:
            from limelight.service.policy import Ownership, Policy
            from limelight.service.portal import PortalConfig, install

            ownership = (Ownership.from_spec(owners, service.doc_ids, service.docs.fields) if owners
                         else Ownership({}, len(service.doc_ids), "none"))
            install(application, service, PortalConfig(
                accounts, Policy(ownership, min_searches, anonymous_search, dp), auth, proxy_header,
                tuple(trusted_proxy), session_hours, https_only))
        config = {"log_level": "warning", "access_log": False, "timeout_keep_alive": 30}
        bound = sock.getsockname()
        url_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        typer.echo(f"serving {audit} ({service.info()['collection']}, {plural(len(service.systems), 'system')}) "
                   f"on http://{url_host}:{bound[1]}/  — API at /api (offline; schema /openapi.json)"
                   + (f"; {n_workers} worker processes" if n_workers > 1 else ""), err=True)
        if n_workers == 1:
            uvicorn.Server(uvicorn.Config(application, **config)).run(sockets=[sock])
        else:
            # each worker opens its own database connections and writes its own pending
            # access-log rows when it stops; the master's are closed before it forks. The master
            # imports the models' libraries (code, no thread pools) once for all its workers
            def before_fork() -> None:
                if preload:
                    service.import_libraries()
                if accounts is not None:
                    accounts.dispose()

            status = serve_workers(application, sock, n_workers, config, before_fork=before_fork,
                                   after_fork=(lambda: service.warm(eqi=preload_eqi)) if preload else lambda: None,
                                   at_exit=accounts.close if accounts is not None else lambda: None,
                                   echo=lambda line: typer.echo(line, err=True))
            if status:
                raise typer.Exit(status)
    finally:
        sock.close()
        if accounts is not None:
            accounts.close()  # writes the access log's pending rows


def check_auth(auth: str | None, db: str | None, owners: str | None, host: str) -> str:
    """The authentication mode of ``serve`` (``--auth``, default password with ``--db``, else
    none); ``LimelightError`` for a combination that cannot work, and for ``none`` on an
    address that is not loopback (every visitor would see every document and the raw log)."""
    from limelight.errors import LimelightError

    auth = auth or ("password" if db else "none")
    if auth not in ("password", "proxy", "none"):
        raise LimelightError(f"--auth {auth!r}: one of password, proxy, none")
    if auth == "none":
        if db or owners:
            raise LimelightError("--db and --owners take effect with --auth password or proxy")
        if not is_loopback(host):
            raise LimelightError(f"refusing to serve {host} without authentication: every visitor would see "
                                 "every document and the raw query log; use --auth password (or proxy) with "
                                 "--db URL, or --host 127.0.0.1")
    elif not db:
        raise LimelightError(f"--auth {auth} needs --db URL (the accounts: limelight users add)")
    return auth


def dp_release_of(audit: Path, auth: str, log: str | None, epsilon: float | None, delta: float, cap: int):
    """The DP release ``--dp-epsilon`` asks for (``None`` without it); it screens what owners
    see, so it needs the portal (``--auth password`` or ``proxy``)."""
    if epsilon is None:
        return None
    from limelight.audit import AuditDir
    from limelight.errors import LimelightError
    from limelight.service.dprelease import release_for_audit

    if auth == "none":
        raise LimelightError("--dp-epsilon takes effect with --auth password or proxy (with --auth none every "
                             "visitor sees the raw log)")
    return release_for_audit(AuditDir(audit).manifest, log, epsilon, delta, cap)


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address."""
    import ipaddress
    import socket

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False
    addrs = {ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos}
    return bool(addrs) and all(a.is_loopback for a in addrs)


def bind_socket(host: str, port: int):
    """A TCP socket bound to ``host:port`` (``LimelightError`` in one line when it cannot be:
    the port is in use, the address is not this machine's, the name does not resolve)."""
    import socket

    from limelight.errors import LimelightError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise LimelightError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        why = "the port is in use (choose another with --port, or 0 for any free one)" \
            if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise LimelightError(f"cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock
