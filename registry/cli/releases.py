"""``releases``, ``resolve`` and ``export``: what a library's releases are,
and a release written to a bundle.

They open the service on the library (``registry.cli.sources``) and sync it
once first; only ``export --url`` talks to a running registry, over HTTP.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from registry.cli.sources import add_source_options, command_settings
from registry.errors import ConfigurationError, RegistryUnavailable
from registry.models import plural
from registry.settings import Settings, environment_for

if TYPE_CHECKING:
    from registry.cli.command import Commands
    from registry.serving.service import RegistryService


def register(commands: Commands) -> None:
    releases = commands.add_parser(
        "releases",
        help="list releases and channels",
        description="List the releases, newest first, marking prereleases and the latest release,"
        " with the channels that point to each; then any channel that cannot be resolved.",
    )
    add_source_options(releases)
    releases.add_argument("--json", action="store_true", help="print the same JSON as GET /v1/releases")
    releases.set_defaults(handler=_releases_command)

    resolve = commands.add_parser(
        "resolve",
        help="print the release a version, range or channel resolves to",
        description="Print the tag and commit that RELEASE resolves to now: an exact version,"
        " an npm-style range (^1.2, ~1.2.3, >=1.1.0 <2.0.0) or a channel (@production).",
    )
    resolve.add_argument("release", metavar="RELEASE")
    add_source_options(resolve)
    resolve.add_argument("--json", action="store_true", help="print the resolution as JSON")
    resolve.set_defaults(handler=_resolve_command)

    export = commands.add_parser(
        "export",
        help="write a release's agents to a bundle, a client's fallback",
        description="Write every agent and partial of RELEASE, with its tag, commit and digests, to one"
        " JSON file that RegistryClient(bundle=FILE) serves from when the registry is unreachable."
        " From a repository (the source options) or, with --url, from a running registry.",
    )
    export.add_argument("--release", default=None, help="version, range or channel (default: latest)")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the bundle")
    add_source_options(export)
    export.add_argument("--url", help="a running registry to export from, instead of a repository")
    export.add_argument("--token", help="bearer token for --url [REGISTRY_TOKEN]")
    export.set_defaults(handler=_export_command)


def _releases_command(args: argparse.Namespace, stack: ExitStack) -> int:
    return _with_service(args, stack, lambda service: _releases(service, as_json=args.json))


def _resolve_command(args: argparse.Namespace, stack: ExitStack) -> int:
    return _with_service(args, stack, lambda service: _resolve(service, args.release, as_json=args.json))


def _export_command(args: argparse.Namespace, stack: ExitStack) -> int:
    if args.url:
        return _write_bundle(_download_bundle(args.url, args.release, args.token), args.output)
    return _with_service(
        args, stack, lambda service: _write_bundle(service.export_bundle(args.release)[1], args.output)
    )


def _with_service(args: argparse.Namespace, stack: ExitStack, command: Callable[[RegistryService], int]) -> int:
    """Run ``command`` on the service of the library, synced once first: a
    failed sync is reported, and stops the command only when there is no
    release to read."""
    from registry.serving.wiring import open_service

    with open_service(command_settings(args, stack)) as service:
        if service.syncer is not None and not service.syncer.sync_now():
            print(f"prompt-registry: {service.syncer.status().last_error}", file=sys.stderr)
            if not service.store.releases().releases:
                return 2
        return command(service)


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


def _download_bundle(url: str, release: str | None, token: str | None) -> bytes:
    import httpx

    # Only this setting: a server's settings in the environment are no
    # business of a download.
    token = Settings.from_env(environment_for("token"), token=token or None).token
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
    from registry.format.bundle import Bundle  # the definitions' validators: for this command only

    bundle = Bundle(data, origin="the exported bundle")
    verified = bundle.verify_all()  # what a client would check, before anyone ships it
    # Written beside the target and renamed: a reader never sees half a bundle.
    directory = os.path.dirname(os.path.abspath(output))
    temporary = None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".bundle-", delete=False) as handle:
            temporary = handle.name
            handle.write(data)
        # A temporary file is private (0600); the bundle gets the mode any
        # new file of this process would get.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, output)
    except OSError as exc:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise ConfigurationError(f"cannot write {output}: {exc.strerror or exc}") from exc
    release = bundle.release
    invalid = len(bundle.agent_names()) - verified
    # Golden files travel in the bundle (a template may include any file),
    # but they are not partials.
    from registry.authoring.examples import GOLDEN_SUFFIX  # the examples runner's imports are not this command's

    partials = sum(1 for path in bundle.partials if not any(p.endswith(GOLDEN_SUFFIX) for p in path.split("/")[:-1]))
    print(
        f"wrote {output}: {release.tag} ({release.commit[:12]}), {plural(verified, 'agent')}"
        f"{f' (and {invalid} invalid)' if invalid else ''}, {plural(partials, 'partial')}"
    )
    return 0
