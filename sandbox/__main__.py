"""Command line: ``python -m sandbox --host 127.0.0.1 --port 0 [--config FILE] [--seed N]``.

Once listening, prints ``sandbox listening on http://HOST:PORT`` on stdout; stops cleanly
on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from sandbox.app import build_app
from sandbox.config import ConfigError, SandboxConfig, load_config
from sandbox.data import DEFAULT_SEED

logger = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one")
    parser.add_argument("--config", help="JSON configuration file (anti-bot, faults)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="dataset seed")
    parser.add_argument("--log-level", default="WARNING", help="logging level (stderr)")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace, config: SandboxConfig) -> None:
    """Run the server until SIGTERM or SIGINT."""
    stop = _stop_event()
    app = build_app(config, seed=args.seed)
    runner = web.AppRunner(app, access_log=logger if args.access_log else None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = runner.addresses[0][1]
        print(f"sandbox listening on http://{_url_host(args.host)}:{port}", flush=True)
        await stop.wait()
        logger.info("stopping")
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        config = load_config(args.config) if args.config else SandboxConfig()
    except (OSError, ConfigError) as exc:
        print(f"sandbox: bad configuration: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(args, config))
    except KeyboardInterrupt:
        logger.info("interrupted before the server started")
    except OSError as exc:
        print(f"sandbox: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


if __name__ == "__main__":
    sys.exit(main())
