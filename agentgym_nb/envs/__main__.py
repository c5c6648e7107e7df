"""python -m agentgym_nb.envs serve babyai --port 36002 [--host 127.0.0.1] [--workers N]

--workers N starts N server processes on ports port..port+N-1; clients spread their envs over them with
`envs.connect(name, ["http://host:port", "http://host:port+1", ...])`.
"""
import argparse

from . import ENV_NAMES, env_class, serve
from .http import serve_workers


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentgym_nb.envs",
                                     description="Serve an environment over AgentGym's HTTP protocol.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the HTTP server for one environment")
    serve_parser.add_argument("name", help=f"environment: {', '.join(ENV_NAMES)}")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=36002)
    serve_parser.add_argument("--workers", type=int, default=1,
                              help="server processes, on ports port..port+workers-1 (each with its own envs)")
    args = parser.parse_args(argv)
    try:
        env_class(args.name)
    except ValueError as error:
        parser.error(str(error))
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.workers == 1:
        serve(args.name, host=args.host, port=args.port)
    else:
        serve_workers(args.name, host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
