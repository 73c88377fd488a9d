"""The ``prompt-registry`` command.

Subcommands call the service (or, for ``serve``, start the server) directly;
only ``export --url`` talks to a running registry, over HTTP. Exit codes: 0 success, 1 the
thing asked for does not exist (a release, a channel), 2 bad usage or
configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from registry import authoring
from registry.bundle import Bundle
from registry.errors import ConfigurationError, NotFound, RegistryError, RegistryUnavailable
from registry.examples import report_text, run_examples
from registry.lint import DEFAULT_ROOT, lint
from registry.lintformat import FORMATS, render_report
from registry.metricsdir import prepare_metrics_directory
from registry.mirror import redact
from registry.settings import Settings

if TYPE_CHECKING:
    from registry.service import RegistryService


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--repo", metavar="PATH", help="git repository whose release tags are served [REGISTRY_REPO]")
    source.add_argument(
        "--worktree", metavar="DIR", help="plain directory served as one release named 'worktree' [REGISTRY_WORKTREE]"
    )
    source.add_argument("--remote", metavar="URL", help="git URL to mirror and serve [REGISTRY_REMOTE]")
    parser.add_argument("--root", help="agents root inside the repository (default ai_gateway/agents) [REGISTRY_ROOT]")
    parser.add_argument(
        "--channels-file", help="channels file on the default branch (default channels.yml) [REGISTRY_CHANNELS_FILE]"
    )
    parser.add_argument(
        "--data-dir", help="where to remember the commit each tag was first seen at [REGISTRY_DATA_DIR]"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prompt-registry",
        description="A git-native, release-pinned registry of agent prompt definitions."
        " Every option falls back to its environment variable (REGISTRY_REPO, ...).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a repository (or a directory) over HTTP",
        description="Serve agent definitions over HTTP under gunicorn. With neither --repo nor"
        " --worktree, the bundled library/ is served as the release 'worktree'.",
    )
    _add_source_options(serve)
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1) [REGISTRY_HOST]")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080) [REGISTRY_PORT]")
    serve.add_argument("--workers", type=int, help="worker processes (default 2) [REGISTRY_WORKERS]")
    serve.add_argument("--threads", type=int, help="threads per worker (default 4) [REGISTRY_THREADS]")
    serve.add_argument(
        "--sync-interval", type=float, help="seconds between fetches (default 60) [REGISTRY_SYNC_INTERVAL]"
    )
    serve.add_argument("--webhook-secret", help="secret for POST /v1/hooks/git [REGISTRY_WEBHOOK_SECRET]")
    serve.add_argument("--redis-url", metavar="URL", help="Redis shared by replicas (optional) [REDIS_URL]")
    serve.add_argument(
        "--redis-prefix", help="prefix of Redis keys and channels (default prompt-registry) [REGISTRY_REDIS_PREFIX]"
    )

    releases = commands.add_parser(
        "releases",
        help="list releases and channels",
        description="List the releases, newest first, marking prereleases and the latest release,"
        " with the channels that point to each; then any channel that cannot be resolved.",
    )
    _add_source_options(releases)
    releases.add_argument("--json", action="store_true", help="print the same JSON as GET /v1/releases")

    resolve = commands.add_parser(
        "resolve",
        help="print the release a version, range or channel resolves to",
        description="Print the tag and commit that RELEASE resolves to now: an exact version,"
        " an npm-style range (^1.2, ~1.2.3, >=1.1.0 <2.0.0) or a channel (@production).",
    )
    resolve.add_argument("release", metavar="RELEASE")
    _add_source_options(resolve)
    resolve.add_argument("--json", action="store_true", help="print the resolution as JSON")

    export = commands.add_parser(
        "export",
        help="write a bundle: every agent and partial of one release, for a client's fallback",
        description="Write every agent and partial of RELEASE, with its tag, commit and digests, to one"
        " JSON file that RegistryClient(bundle=FILE) serves from when the registry is unreachable."
        " From a repository (the source options) or, with --url, from a running registry.",
    )
    export.add_argument("--release", default=None, help="version, range or channel (default: latest)")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the bundle")
    _add_source_options(export)
    export.add_argument("--url", help="a running registry to export from, instead of a repository")
    export.add_argument("--token", help="bearer token for --url [REGISTRY_TOKEN]")

    lint = commands.add_parser(
        "lint",
        help="check a library checkout; exit 1 on any error",
        description="Check every definition and partial of a library checkout as the registry would"
        " serve it, plus what is probably a mistake (unused inputs and partials, computed includes,"
        " files outside the layout). Exit 1 when there is an error, 0 otherwise.",
    )
    lint.add_argument("path", nargs="?", default=".", help="the library checkout (default .)")
    lint.add_argument("--root", help=f"agents root inside PATH (default {DEFAULT_ROOT})")
    lint.add_argument("--format", choices=FORMATS, default="text", help="text (default), json, junit or codequality")
    lint.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")

    new = commands.add_parser(
        "new",
        help="scaffold a valid definition",
        description="Write <root>/USECASE/NAME.yml: a valid definition to edit, with a header that points"
        " YAML editors at the definition's JSON Schema.",
    )
    new.add_argument("agent", metavar="USECASE/NAME")
    new.add_argument("path", nargs="?", default=".", help="the library checkout (default .)")
    new.add_argument("--root", help=f"agents root inside PATH (default {DEFAULT_ROOT})")

    test = commands.add_parser(
        "test",
        help="render every definition's examples and check them; exit 1 on a failure",
        description="Render the examples of every definition in a library checkout and check their"
        " expectations (contains, not_contains, matches) and golden files.",
    )
    test.add_argument("path", nargs="?", default=".", help="the library checkout (default .)")
    test.add_argument("--root", help=f"agents root inside PATH (default {DEFAULT_ROOT})")
    test.add_argument("--update", action="store_true", help="write golden files that are missing or differ")

    diff = commands.add_parser(
        "diff",
        help="what changed between two versions of the library",
        description="Agents added, removed and changed between FROM and TO; for a changed agent, the"
        " fields that changed, a diff of each template and partial, and of what the model receives for"
        " each example. Each ref is a release (v1.2.0, ^1.2, @channel, latest), a branch, tag or commit,"
        " or 'worktree' for the checkout's files.",
    )
    diff.add_argument("source", metavar="FROM")
    diff.add_argument("target", metavar="TO")
    diff.add_argument("--repo", default=".", metavar="PATH", help="the library repository (default .)")
    diff.add_argument("--root", help=f"agents root (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")
    diff.add_argument("--format", choices=("text", "json"), default="text")

    check = commands.add_parser(
        "check-release",
        help="fail when NEXT_VERSION is smaller than the changes since the last release require",
        description="Compare the working tree (or --ref) with the last release (or --against) and classify"
        " the change: removing an agent or input, adding a required input or narrowing an input's type is"
        " major; adding an agent or an optional input is minor; any other change is patch. Exit 1 when"
        " NEXT_VERSION is smaller than that, or when an existing tag's content would change.",
    )
    check.add_argument("next_version", metavar="NEXT_VERSION")
    check.add_argument("--against", metavar="RELEASE", help="the release to compare with (default: the highest)")
    check.add_argument("--ref", default="worktree", help="what is being released (default: worktree)")
    check.add_argument("--repo", default=".", metavar="PATH", help="the library repository (default .)")
    check.add_argument("--root", help=f"agents root (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")

    parse = commands.add_parser(
        "parse",
        help="parse a model reply with an agent's output parser",
        description="Print what the agent's output parser makes of a model reply: a tool call, a final"
        " answer, or a parse error with the observation to send back (then exit 1). The same result as"
        " POST .../parse and the client's agent.parse.",
    )
    parse.add_argument("agent", metavar="USECASE/NAME")
    parse.add_argument("--output-file", required=True, metavar="FILE", help="the model's reply ('-' for stdin)")
    _add_source_options(parse)
    parse.add_argument("--release", help="version, range or channel (default: the working tree)")

    render = commands.add_parser(
        "render",
        help="print an agent's rendered messages",
        description="Render USECASE/NAME with inputs and print the messages. Renders the working tree"
        " (--worktree, default .) or, with --release, a release of the repository (--repo, default .).",
    )
    render.add_argument("agent", metavar="USECASE/NAME")
    _add_source_options(render)
    render.add_argument("--release", help="version, range or channel (default: the working tree)")
    render.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="an input; VALUE is JSON, or else a string"
    )
    render.add_argument("--inputs-file", metavar="FILE", help="a JSON or YAML file of inputs")
    render.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    data_dir = args.data_dir
    if (args.remote or os.environ.get("REGISTRY_REMOTE")) and not (data_dir or os.environ.get("REGISTRY_DATA_DIR")):
        data_dir = tempfile.mkdtemp(prefix="prompt-registry-")
        logging.getLogger("registry").warning(
            "no --data-dir: mirroring into %s, and tag memory will not survive a restart", data_dir
        )
    # A source given on the command line replaces the other one's environment
    # variable ("" clears it; None means "not given").
    return Settings.from_env(
        repo=args.repo if args.repo else ("" if args.worktree or args.remote else None),
        worktree=args.worktree if args.worktree else ("" if args.repo or args.remote else None),
        remote=args.remote if args.remote else ("" if args.repo or args.worktree else None),
        root=args.root,
        channels_file=args.channels_file,
        data_dir=data_dir,
        **extra,
    )


def _serve(settings: Settings) -> int:
    # Before registry.app (which imports prometheus_client): metrics from
    # every worker process are added up through this directory.
    prepare_metrics_directory()
    from registry.app import build_service
    from registry.server import RegistryServer

    # Open the store once before forking, so that a wrong path fails here
    # with a clear message rather than in every worker (and a new mirror is
    # created once, not raced by the workers).
    service = build_service(settings)
    try:
        count = len(service.store.releases().releases)
    finally:
        service.close()
    logging.getLogger("registry").info(
        "serving %s (%d release%s) on http://%s:%d, caching %s",
        settings.source_description,
        count,
        "" if count == 1 else "s",
        settings.host,
        settings.port,
        f"in memory and in Redis at {redact(settings.redis_url)}" if settings.redis_url else "in memory",
    )
    RegistryServer(settings).run()
    return 0


def _releases(service: RegistryService, *, as_json: bool) -> int:
    overview = service.releases()
    if as_json:
        print(json.dumps(overview.as_dict(), indent=2))
        return 0
    channels = overview.channels.describe(overview.index)
    latest = overview.index.latest
    if not overview.index.releases:
        print("no releases: tag a commit with a version such as v1.0.0")
    pointing: dict[str, list[str]] = {}
    for name, entry in channels.items():
        if "tag" in entry:
            pointing.setdefault(entry["tag"], []).append("@" + name)
    width = max((len(r.tag) for r in overview.index.releases), default=3)
    for release in overview.index.releases:
        marks = [*pointing.get(release.tag, [])]
        if latest is not None and release.tag == latest.tag:
            marks.insert(0, "latest")
        if release.prerelease:
            marks.insert(0, "prerelease")
        print(f"{release.tag:<{width}}  {release.commit[:12]}  {' '.join(marks)}".rstrip())
    for name, entry in channels.items():
        if "error" in entry:
            print(f"@{name}: {entry['error']}", file=sys.stderr)
    for problem in overview.channels.problems:
        where = f"{problem.file}:{problem.line}" if problem.line else str(problem.file)
        print(f"{where}: {problem.message}", file=sys.stderr)
    return 0


def _resolve(service: RegistryService, release: str, *, as_json: bool) -> int:
    resolution = service.resolve(release)
    if as_json:
        print(json.dumps(resolution.as_dict(), indent=2))
    else:
        print(f"{resolution.release.tag}\t{resolution.release.commit}")
    return 0


def _lint(args: argparse.Namespace) -> int:
    progress = _progress if sys.stderr.isatty() else None
    report = lint(args.path, root=args.root, progress=progress)
    if progress is not None:
        print("\r\033[K", end="", file=sys.stderr)
    colour = args.output is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    text = render_report(report, args.format, colour=colour)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(render_report(report, "text").splitlines()[-1])
    else:
        sys.stdout.write(text)
    return 1 if report.errors else 0


def _progress(done: int, total: int) -> None:
    if done == total or done % 25 == 0:
        print(f"\rlinting {done}/{total} definitions", end="", file=sys.stderr, flush=True)


def _render_settings(args: argparse.Namespace) -> Settings:
    # The author's default: the working tree they are editing; with --release,
    # the repository they are in.
    if not (args.repo or args.worktree or args.remote):
        if args.release:
            args.repo = "."
        else:
            args.worktree = "."
    return _settings(args)


def _download_bundle(url: str, release: str | None, token: str | None) -> bytes:
    import httpx

    token = token or os.environ.get("REGISTRY_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params = {"release": release} if release else {}
    try:
        response = httpx.get(url.rstrip("/") + "/v1/bundle", params=params, headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        raise RegistryUnavailable(f"cannot reach {url}: {exc}") from exc
    if response.status_code != 200:
        from registry.client.core import error_from_problem

        raise error_from_problem(response)
    return response.content


def _write_bundle(data: bytes, output: str) -> int:
    bundle = Bundle(data, origin="the exported bundle")
    verified = bundle.verify_all()  # what a client would check, before anyone ships it
    # Written beside the target and renamed: a reader never sees half a bundle.
    directory = os.path.dirname(os.path.abspath(output))
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".bundle-", delete=False) as handle:
            handle.write(data)
        os.replace(handle.name, output)
    except OSError as exc:
        raise ConfigurationError(f"cannot write {output}: {exc.strerror or exc}") from exc
    release = bundle.release
    invalid = len(bundle.agent_names()) - verified
    print(
        f"wrote {output}: {release.tag} ({release.commit[:12]}), {verified} agents"
        f"{f' (and {invalid} invalid)' if invalid else ''}, {len(bundle.partials)} partials"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prompt-registry`` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            settings = _settings(
                args,
                host=args.host,
                port=args.port,
                workers=args.workers,
                threads=args.threads,
                sync_interval=args.sync_interval,
                webhook_secret=args.webhook_secret,
                redis_url=args.redis_url,
                redis_prefix=args.redis_prefix,
            )
            return _serve(settings)
        if args.command == "export" and args.url:
            return _write_bundle(_download_bundle(args.url, args.release, args.token), args.output)
        if args.command == "lint":
            return _lint(args)
        if args.command == "test":
            report = run_examples(args.path, root=args.root, update=args.update)
            sys.stdout.write(report_text(report))
            return 1 if report.failed else 0
        if args.command in ("diff", "check-release"):
            settings = Settings.from_env(repo=args.repo, worktree="", remote="", root=args.root)
            if args.command == "diff":
                return authoring.diff_command(
                    args.repo, settings, args.source, args.target, as_json=args.format == "json"
                )
            return authoring.check_release_command(
                args.repo, settings, args.next_version, against=args.against, ref=args.ref
            )
        if args.command == "new":
            return authoring.scaffold(args.agent, args.path, root=args.root)
        if args.command == "parse":
            return authoring.parse_command(args.agent, _render_settings(args), args.output_file, release=args.release)
        if args.command == "render":
            return authoring.render_command(
                args.agent,
                _render_settings(args),
                release=args.release,
                inputs=authoring.parse_inputs(args.input, args.inputs_file),
                as_json=args.format == "json",
            )
        from registry.app import build_service

        service = build_service(_settings(args))
        try:
            if service.syncer is not None and not service.syncer.sync_now():
                print(f"prompt-registry: {service.syncer.status().last_error}", file=sys.stderr)
                if not service.store.releases().releases:
                    return 2
            if args.command == "releases":
                return _releases(service, as_json=args.json)
            if args.command == "export":
                return _write_bundle(service.export_bundle(args.release)[1], args.output)
            return _resolve(service, args.release, as_json=args.json)
        finally:
            service.store.close()
    except NotFound as exc:
        print(f"prompt-registry: {exc}", file=sys.stderr)
        return 1
    except (ConfigurationError, RegistryError) as exc:
        print(f"prompt-registry: {exc}", file=sys.stderr)
        for issue in getattr(exc, "errors", []):
            where = ":".join(str(p) for p in (issue.file, issue.line, issue.column) if p is not None)
            print(f"  {where + ': ' if where else ''}{issue.path or '/'}: {issue.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
