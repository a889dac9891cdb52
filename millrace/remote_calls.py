"""Calls to object storage with a deadline and a bounded retry: the one layer for reads (the loader's range
reads) and writes (`store copy`, publishing, a run's records at `[run] url`).

s3fs retries each call 5 times inside a loop of 5, over botocore's own retries: a server that never answers
cost 900 s with no word. So those layers are set to one attempt each (`single_retry_layer`), every call is
cancelled at its deadline (`within_deadline`), and retried here alone (`with_retries`), a log line per retry,
ending in one line that names the object.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

from millrace.errors import ArtifactError, ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")
MIN_WRITE_RATE = 1 << 20  # bytes per second a write is allowed at least, on top of its deadline


@dataclass(frozen=True)
class CallLimits:
    """How long one call may take (`timeout` seconds, named `setting` in messages) and how often it is retried."""

    timeout: float = 60.0
    retries: int = 4  # attempts after the first failed one (the only retries: see the module docstring)
    backoff_s: float = 0.2  # first wait; doubles each attempt
    setting: str = "read_timeout"

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff_s < 0:
            raise ConfigError(f"retries {self.retries} / backoff_s {self.backoff_s}: must be non-negative")
        if not 0 < self.timeout < float("inf"):
            raise ConfigError(f"{self.setting} {self.timeout}: must be a positive number of seconds")


WRITE_LIMITS = CallLimits(timeout=60.0, setting="write_timeout")


def describe_failure(exc: BaseException, limits: CallLimits) -> str:
    """A failed call in words: a deadline passed says so (fsspec's FSTimeoutError has no message)."""
    import asyncio  # lazy: heavy (asyncio): only for an async filesystem

    from fsspec.exceptions import FSTimeoutError  # lazy: heavy (fsspec): only where a path is a URL

    if isinstance(exc, (FSTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return f"stalled: no complete answer within {limits.setting} {limits.timeout:g}s"
    text = str(exc).splitlines()[0] if str(exc) else repr(exc.__cause__ or exc.__context__ or "")
    return f"{type(exc).__name__}: {text}"


def with_retries(what: str, action: Callable[[], T], limits: CallLimits, verb: str = "read") -> T:
    """`action()`, retried on transient errors with exponential backoff (a log line per retry); then one
    line naming `what` (the object's URL, and byte range for a read)."""
    for attempt in range(limits.retries + 1):
        try:
            return action()
        except FileNotFoundError:
            missing = "object not found" if verb == "read" else f"{verb} failed: no such bucket or folder"
            raise ArtifactError(f"{what}: {missing}") from None
        except PermissionError as exc:
            raise ArtifactError(f"{what}: {verb} refused ({describe_failure(exc, limits)})") from None
        except Exception as exc:  # fsspec backends raise their own types (botocore, aiohttp, OSError)
            cause = describe_failure(exc, limits)
            if attempt == limits.retries:
                raise ArtifactError(f"{what}: {verb} failed after {attempt + 1} attempts ({cause})") from None
            wait = limits.backoff_s * 2**attempt
            log.warning(
                "%s: %s failed (%s); retry %d of %d in %.2fs", what, verb, cause, attempt + 1, limits.retries, wait
            )
            time.sleep(wait)
    raise AssertionError("unreachable")


def within_deadline(fs: AbstractFileSystem, method: str, *args: object, timeout: float, **kwargs: object) -> Any:
    """`fs.<method>(*args)`, cancelled after `timeout` seconds where the filesystem is asynchronous (s3, gcs,
    http: a server that accepts and never answers, a body that stops); a local one is called as it is.
    Returns what `fs.<method>` does: fsspec's methods are untyped, so it is Any, and each caller says its type."""
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        from fsspec.asyn import sync  # lazy: heavy (fsspec): only where a path is a URL

        return sync(fs.loop, getattr(fs, f"_{method}"), *args, timeout=timeout, **kwargs)
    return getattr(fs, method)(*args, **kwargs)


def single_retry_layer(protocol: str, storage_options: Mapping[str, object], timeout: float) -> dict[str, object]:
    """Storage options that leave retrying to `with_retries`: for s3, botocore makes one attempt with
    `timeout` for connecting and reading (s3fs's own retries are set on the instance: `one_attempt`)."""
    if protocol not in ("s3", "s3a"):
        return dict(storage_options)
    given = storage_options.get("config_kwargs") or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"storage_options.config_kwargs {given!r:.80}: expected a table of botocore settings")
    config = {
        **given,
        "connect_timeout": timeout,
        "read_timeout": timeout,
        "retries": {"total_max_attempts": 1},
    }
    return {**storage_options, "config_kwargs": config, "skip_instance_cache": True}


def one_attempt(fs: AbstractFileSystem) -> AbstractFileSystem:
    """`fs` with s3fs's own retry loop set to one attempt (its own instance: `single_retry_layer`)."""
    if hasattr(fs, "retries"):
        fs.retries = 1
    return fs


def limited_fs(
    url: str, storage_options: Mapping[str, object] | None, limits: CallLimits
) -> tuple[AbstractFileSystem, str]:
    """The filesystem and root path of `url`, with this module's layer as its only retries."""
    import fsspec  # lazy: heavy (fsspec): only where a path is a URL

    protocol = url.split("://", 1)[0] if "://" in url else "file"
    fs, root = fsspec.core.url_to_fs(url, **single_retry_layer(protocol, storage_options or {}, limits.timeout))
    return one_attempt(fs), root.rstrip("/")


def put_file(fs: AbstractFileSystem, local: str, target: str, size: int, limits: CallLimits = WRITE_LIMITS) -> None:
    """Upload one file within its deadline (`limits.timeout`, plus a second per MiB), retried; one line naming
    the object when every attempt failed."""
    deadline = limits.timeout + size / MIN_WRITE_RATE
    with_retries(
        fs.unstrip_protocol(target),
        lambda: within_deadline(fs, "put_file", local, target, timeout=deadline),
        limits,
        "write",
    )


def pipe_file(fs: AbstractFileSystem, target: str, data: bytes, limits: CallLimits = WRITE_LIMITS) -> None:
    """Write one object whole (a PUT) within its deadline, retried; one line naming it when every attempt failed."""
    deadline = limits.timeout + len(data) / MIN_WRITE_RATE
    with_retries(
        fs.unstrip_protocol(target),
        lambda: within_deadline(fs, "pipe_file", target, data, timeout=deadline),
        limits,
        "write",
    )
